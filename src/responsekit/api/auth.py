"""API keys and ownership: with keys in use, every stored object belongs to the key that made it.

Keys are kept only as SHA-256 hashes (a configured `sha256:<hex>` entry is a hash already),
and the hash is the owner of what the key creates. Keys come from the configuration
(`api_keys`) and from the store (`store/api_keys.py`: made with `responsekit api-keys` or
the admin API, with an expiry, the models they may use and their limits). Admin keys
(`admin_api_keys`) are for the admin API and the usage report only. Without any key
everything belongs to one anonymous owner.

Checking a key reads sets and a dictionary in memory: no database on a request's path.
"""

from __future__ import annotations

import hashlib
import time
from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from ..canonical.errors import APIError
from ..store.api_keys import ApiKey, KeyTable


def key_hash(key: str) -> str:
    return key.removeprefix("sha256:") if key.startswith("sha256:") else hashlib.sha256(key.encode()).hexdigest()


class Keys:
    """Every key this server accepts: configured ones, admin ones, and the stored ones (`table`,
    set once the store is open)."""

    def __init__(self, configured: frozenset[str], admins: frozenset[str]) -> None:
        self.configured = configured
        self.admins = admins
        self.table: KeyTable | None = None

    @property
    def required(self) -> bool:
        """Whether requests need a key: some are configured, or some were ever stored."""
        return bool(self.configured or self.admins or (self.table is not None and self.table.any))

    def stored(self, owner: str) -> ApiKey | None:
        return self.table.find(owner) if self.table is not None else None

    def valid(self, owner: str) -> bool:
        """Whether this hash is a key usable for the API now (not an admin key: those only administer)."""
        if owner in self.configured:
            return True
        key = self.stored(owner)
        return key is not None and key.usable(time.time())


GOOGLE_KEY_PATHS = ("/v1beta/", "/v1alpha/", "/v1/models", "/v1/v1beta/", "/v1/v1/models")
"""Where Google's clients send their key as `x-goog-api-key` or `?key=` (the Gemini API)."""


def bearer(connection: HTTPConnection) -> str:
    """The key a request carries: `Authorization: Bearer`, `x-api-key` (Anthropic's clients send it
    there), or on the Gemini API's paths `x-goog-api-key` or the `key` query parameter (Google's)."""
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        token = ""
    token = token.strip() or connection.headers.get("x-api-key", "").strip()
    if token or not connection.url.path.startswith(GOOGLE_KEY_PATHS):
        return token
    return connection.headers.get("x-goog-api-key", "").strip() or connection.query_params.get("key", "").strip()


def _missing() -> APIError:
    return APIError(
        401, "You didn't provide an API key. Send it as `Authorization: Bearer KEY` or `x-api-key: KEY`.",
        code="missing_api_key",
    )


def authorize(connection: HTTPConnection) -> str:
    """The owner of this request's objects; 401 when keys are in use and it has no valid one.

    A stored key found is left in `connection.state.api_key` (else None) for the model and
    limit checks that follow.
    """
    keys: Keys = connection.scope["app"].state.keys
    if not keys.required:
        return ""  # `caller` and `allow_model` read no key and owner "" from the state they left unset
    state = connection.state
    state.api_key = None
    state.owner = ""
    token = bearer(connection)
    if not token:
        raise _missing()
    owner = hashlib.sha256(token.encode()).hexdigest()
    if owner in keys.configured:
        state.owner = owner
        return owner
    key = keys.stored(owner)
    if key is None:
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    now = time.time()
    if key.revoked_at is not None:
        raise APIError(401, "This API key has been revoked.", code="invalid_api_key")
    if key.expires_at is not None and now >= key.expires_at:
        raise APIError(401, "This API key has expired.", code="expired_api_key")
    assert keys.table is not None
    keys.table.used(key, now)
    state.api_key = key
    state.owner = owner
    return owner


def authorize_admin(connection: HTTPConnection) -> str:
    """The admin key's hash; 401 without a key or with an unknown one, 403 with a key that is not an admin key."""
    keys: Keys = connection.app.state.keys
    token = bearer(connection)
    if not token:
        raise _missing()
    owner = hashlib.sha256(token.encode()).hexdigest()
    if owner in keys.admins:
        return owner
    if keys.valid(owner):
        raise APIError(403, "This API key is not an admin key: it cannot use the admin API "
                       "(admin keys are set with `admin_api_keys`).", type="permission_error",
                       code="insufficient_permissions")  # fmt: skip
    raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")


def allow_model(connection: HTTPConnection, *names: str | None) -> None:
    """404 (OpenAI's answer for a model a key has no access to) when the request's key may not use
    a model by any of these names (the one asked, the one it is served as)."""
    key: ApiKey | None = connection.scope.get("state", {}).get("api_key")
    given = [name for name in names if name]
    if key is None or not given or key.allows(*given):
        return
    raise APIError(404, f"The model `{given[0]}` does not exist or you do not have access to it.",
                   param="model", code="model_not_found")  # fmt: skip


async def _owner(connection: HTTPConnection) -> str:
    """`authorize` as a dependency: asynchronous, since FastAPI runs a synchronous dependency
    in its thread pool (a thread hop per request, for a hash and a set lookup)."""
    return authorize(connection)


async def _admin(connection: HTTPConnection) -> str:
    return authorize_admin(connection)


Owner = Annotated[str, Depends(_owner)]
Admin = Annotated[str, Depends(_admin)]
