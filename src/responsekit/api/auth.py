"""API keys and ownership: with keys configured, every stored object belongs to the key that made it.

Keys are kept only as SHA-256 hashes (a configured `sha256:<hex>` entry is a hash already),
and the hash is the owner of what the key creates. Without keys everything belongs to
one anonymous owner.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from ..canonical.errors import APIError


def key_hash(key: str) -> str:
    return key.removeprefix("sha256:") if key.startswith("sha256:") else hashlib.sha256(key.encode()).hexdigest()


def authorize(connection: HTTPConnection) -> str:
    """The owner of this request's objects; 401 when keys are configured and it has no valid one."""
    owners: frozenset[str] = connection.app.state.owners
    if not owners:
        return ""
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        token = ""
    token = token.strip() or connection.headers.get("x-api-key", "").strip()  # Anthropic's clients send it there
    if not token:
        raise APIError(
            401, "You didn't provide an API key. Send it as `Authorization: Bearer KEY` or `x-api-key: KEY`.",
            code="missing_api_key",
        )
    owner = hashlib.sha256(token.encode()).hexdigest()
    if owner not in owners:
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    return owner


async def _owner(connection: HTTPConnection) -> str:
    """`authorize` as a dependency: asynchronous, since FastAPI runs a synchronous dependency
    in its thread pool (a thread hop per request, for a hash and a set lookup)."""
    return authorize(connection)


Owner = Annotated[str, Depends(_owner)]
