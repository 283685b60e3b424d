"""Who may look: the inspector's owner scoping, like the API's.

With API keys configured, a browser logs in once with its key; the cookie it gets holds the
key's hash sealed by the server (`Sealer`, so it cannot be forged or read, and the key itself
is never kept; it lasts `SESSION_SECONDS`), and the page shows only that key's objects. Without keys the API belongs to one
anonymous owner and the server listens on loopback by default; the inspector shows everything,
so it answers loopback clients only, whatever `--host` says.
"""

from __future__ import annotations

import hashlib
import ipaddress

from starlette.requests import Request

from ...orchestration.sealing import Sealer

COOKIE = "responsekit_ui"
SESSION = "ui-session"
SESSION_SECONDS = 12 * 3600
"""A login lasts a working day: the sealed cookie carries its time (Fernet's), and an older one
opens to nothing, so a copied cookie does not work forever."""


class Refused(Exception):
    """No keys configured and the client is not on loopback."""


def loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return host == "localhost"


def viewer(request: Request) -> str | None:
    """The owner whose objects this browser sees; None when it must log in first."""
    keys = request.app.state.keys
    if not keys.required:
        if not loopback(request.client.host if request.client else None):
            raise Refused
        return ""
    sealed = request.cookies.get(COOKIE)
    owner = _sealer(request).open(SESSION, sealed, max_age=SESSION_SECONDS) if sealed else None
    return owner if owner is not None and keys.valid(owner) else None  # a key removed or revoked ends its sessions


def session_for(request: Request, key: str) -> str | None:
    """The cookie value for a login with `key`, or None when it is no configured key. The key is
    hashed as `authorize` hashes a bearer token (a configured `sha256:` hash is not a key)."""
    owner = hashlib.sha256(key.strip().encode()).hexdigest()
    if not request.app.state.keys.valid(owner):
        return None
    return _sealer(request).seal(SESSION, owner)


def _sealer(request: Request) -> Sealer:
    return request.app.state.orchestrator.sealer
