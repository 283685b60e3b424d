"""The admin API: `/admin/v1/api-keys` makes, lists, shows and revokes stored API keys, and
`/v1/organization/usage/completions` reports usage.

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
from ..store.usage import GROUPS, buckets
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
    weight: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 1.0
    """Its share of a busy engine against other keys waiting (`backends/fairness.py`)."""


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
        body.name, team=body.team, models=body.models, expires_at=body.expires_at, limits=limits, weight=body.weight
    )
    return JSONResponse({**key.body(), "key": secret}, status_code=201)


@router.get("/api-keys")
async def list_keys(request: Request, _admin: Admin) -> dict[str, Any]:
    """A page of keys, as OpenAI's admin API lists its keys: `limit` (1 to 100, default 20),
    `order` (`asc`, oldest first, the default; or `desc`) and `after` (the `last_id` of the page
    before)."""
    query = request.query_params
    limit = _integer(query, "limit")
    limit = 20 if limit is None else limit
    if not 1 <= limit <= 100:
        raise APIError(400, "`limit` must be between 1 and 100.", param="limit", code="invalid_value")
    order = query.get("order", "asc")
    if order not in ("asc", "desc"):
        raise APIError(400, "`order` must be asc or desc.", param="order", code="invalid_value")
    after = query.get("after")
    if after is not None and not storable(after):
        raise APIError(400, "`after` is not a key id.", param="after", code="invalid_value")
    keys = await _table(request).listing(after, limit + 1, newest_first=order == "desc")
    data = [key.body() for key in keys[:limit]]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(keys) > limit}  # fmt: skip


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


usage_router = APIRouter()

WIDTHS = {"1m": (60, 60, 1440), "1h": (3600, 24, 168), "1d": (86400, 7, 31)}
"""`bucket_width` -> its seconds, the default and the largest `limit` (OpenAI's Usage API)."""


@usage_router.get("/v1/organization/usage/completions")
async def usage_completions(request: Request, _admin: Admin) -> dict[str, Any]:
    """Tokens and requests of every generation, in OpenAI's Usage API shape: buckets of a minute,
    an hour or a day from `start_time`, optionally grouped by `api_key_id` and `model`."""
    query = request.query_params
    width_name = query.get("bucket_width", "1d")
    if width_name not in WIDTHS:
        raise APIError(400, "`bucket_width` must be 1m, 1h or 1d.", param="bucket_width", code="invalid_value")
    width, default_limit, most = WIDTHS[width_name]
    start = _integer(query, "start_time", required=True)
    end = _integer(query, "end_time") or int(time.time()) + 1
    limit = _integer(query, "limit")
    limit = default_limit if limit is None else limit
    if not 1 <= limit <= most:
        raise APIError(400, f"`limit` must be between 1 and {most} for {width_name} buckets.", param="limit",
                       code="invalid_value")  # fmt: skip
    page = query.get("page")
    if page is not None:
        if not page.isdigit() or len(page) > 12:
            raise APIError(400, "`page` is not a page this API gave.", param="page", code="invalid_value")
        start = int(page)
    if end <= start:
        raise APIError(400, "`end_time` must be after `start_time`.", param="end_time", code="invalid_value")
    group_by = query.getlist("group_by") + query.getlist("group_by[]")
    unknown = [group for group in group_by if group not in GROUPS]
    if unknown:
        raise APIError(400, f"Cannot group by {unknown[0]!r}: use api_key_id or model.", param="group_by",
                       code="invalid_value")  # fmt: skip
    count = min(limit, -(-(end - start) // width))
    stop = min(end, start + count * width)
    found = await buckets(
        request.app.state.store.database, start, stop, width, group_by,
        api_key_ids=query.getlist("api_key_ids") + query.getlist("api_key_ids[]") or None,
        models=query.getlist("models") + query.getlist("models[]") or None,
    )  # fmt: skip
    data = [{"object": "bucket", "start_time": start + index * width, "end_time": min(start + (index + 1) * width, stop),
             "results": found.get(index, [])} for index in range(count)]  # fmt: skip
    more = stop < end
    return {"object": "page", "data": data, "has_more": more, "next_page": str(stop) if more else None}


def _integer(query: Any, name: str, required: bool = False) -> int | None:
    value = query.get(name)
    if value is None:
        if required:
            raise APIError(400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
        return None
    if not value.isdigit() or len(value) > 12:
        raise APIError(400, f"`{name}` must be a whole number (Unix seconds for times).", param=name,
                       code="invalid_value")  # fmt: skip
    return int(value)
