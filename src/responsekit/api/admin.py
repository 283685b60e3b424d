"""The admin API: `/admin/v1/api-keys` makes, lists, shows and revokes stored API keys.

Authorized by the admin keys (`admin_api_keys`, `auth.authorize_admin`): 401 without a key,
403 with a key that is not one. The objects follow the shape of OpenAI's admin API for keys
(`object`, `id`, `name`, `redacted_value`, `created_at`, `last_used_at`), with what a key of
this server also has: its team, expiry, models and limits. The secret is in the answer to
its creation only (`key`): only its SHA-256 is stored.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..canonical.errors import APIError
from ..canonical.ids import storable
from ..store.api_keys import KeyTable, Limits
from .auth import Admin
from .http import JSONResponse, read_body
from .routing import json_body

router = APIRouter(prefix="/admin/v1")


def _storable(value: str) -> str:
    if not storable(value):
        raise ValueError("must be text without NUL characters or lone surrogates")
    return value


Text = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_storable)]
Count = Annotated[int, Field(ge=1, le=2**62)]


class LimitsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rpm: Count | None = None
    tpm: Count | None = None
    max_concurrent: Count | None = None
    daily_tokens: Count | None = None
    monthly_tokens: Count | None = None


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Text
    team: Text | None = None
    models: Annotated[list[Text], Field(max_length=1000)] | None = None
    """The models the key may use; absent or null: all."""
    expires_at: Annotated[int, Field(ge=0, le=2**62)] | None = None
    """Unix seconds; after it the key is refused."""
    limits: LimitsBody | None = None


def _table(request: Request) -> KeyTable:
    table: KeyTable | None = request.app.state.keys.table
    assert table is not None  # set as the store opens, before the first request
    return table


@router.post("/api-keys", status_code=201, openapi_extra=json_body(CreateKey))
async def create_key(request: Request, _admin: Admin) -> JSONResponse:
    body = await read_body(request, CreateKey)
    if body.expires_at is not None and body.expires_at <= time.time():
        raise APIError(400, "`expires_at` is in the past.", param="expires_at", code="invalid_value")
    limits = Limits.from_dict(body.limits.model_dump() if body.limits else None)
    key, secret = await _table(request).create(
        body.name, team=body.team, models=body.models, expires_at=body.expires_at, limits=limits
    )
    return JSONResponse({**key.body(), "key": secret}, status_code=201)


@router.get("/api-keys")
async def list_keys(request: Request, _admin: Admin) -> dict[str, Any]:
    data = [key.body() for key in await _table(request).listing()]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": False}  # fmt: skip


@router.get("/api-keys/{key_id}")
async def retrieve_key(request: Request, key_id: str, _admin: Admin) -> dict[str, Any]:
    key = await _table(request).get(key_id)
    if key is None:
        raise _not_found(key_id)
    return key.body()


@router.delete("/api-keys/{key_id}")
async def revoke_key(request: Request, key_id: str, _admin: Admin) -> dict[str, Any]:
    """Revoke the key: every replica refuses it within a second (`store/api_keys.py`)."""
    key = await _table(request).revoke(key_id)
    if key is None:
        raise _not_found(key_id)
    return {"object": "api_key.deleted", "id": key.id, "deleted": True, "revoked_at": key.revoked_at}


def _not_found(key_id: str) -> APIError:
    return APIError(404, f"API key with id '{key_id}' not found.", param="key_id", code="not_found")
