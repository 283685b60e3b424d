"""`/v1/conversations`: the eight endpoints of the Conversations API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ..canonical.errors import APIError
from ..canonical.ids import new_id
from ..orchestration.items import normalize_item
from ..store import DuplicateItem, Store
from .auth import Owner
from .http import read_body
from .routing import json_body

router = APIRouter()


class CreateConversation(BaseModel):
    model_config = ConfigDict(extra="allow")
    items: list[Any] = Field(default_factory=list, max_length=20)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


class UpdateConversation(BaseModel):
    model_config = ConfigDict(extra="allow")
    metadata: dict[str, str] = Field(max_length=16)


class AddItems(BaseModel):
    model_config = ConfigDict(extra="allow")
    items: list[Any] = Field(min_length=1, max_length=20)


def _store(request: Request) -> Store:
    return request.app.state.store


@router.post("/conversations", openapi_extra=json_body(CreateConversation))
async def create_conversation(request: Request, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, CreateConversation)
    conversation = {"id": new_id("conv"), "object": "conversation", "created_at": int(time.time()),
                    "metadata": body.metadata or {}}  # fmt: skip
    with _unique_items():
        await _store(request).create_conversation(owner, conversation, _items(body.items))
    return conversation


@router.get("/conversations/{conversation_id}")
async def retrieve_conversation(request: Request, conversation_id: str, owner: Owner) -> dict[str, Any]:
    return await _conversation(request, owner, conversation_id)


@router.post("/conversations/{conversation_id}", openapi_extra=json_body(UpdateConversation))
async def update_conversation(request: Request, conversation_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, UpdateConversation)
    await _conversation(request, owner, conversation_id)
    await _store(request).update_conversation(owner, conversation_id, body.metadata)
    return await _conversation(request, owner, conversation_id)


@router.delete("/conversations/{conversation_id}")
async def delete_conversation(request: Request, conversation_id: str, owner: Owner) -> dict[str, Any]:
    if not await _store(request).delete_conversation(owner, conversation_id):
        raise _not_found(conversation_id)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.post("/conversations/{conversation_id}/items", openapi_extra=json_body(AddItems))
async def add_items(request: Request, conversation_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, AddItems)
    await _conversation(request, owner, conversation_id)
    items = _items(body.items)
    with _unique_items():
        await _store(request).add_conversation_items(conversation_id, items)
    return {"object": "list", "data": items, "first_id": items[0]["id"], "last_id": items[-1]["id"], "has_more": False}


@router.get("/conversations/{conversation_id}/items")
async def list_items(
    request: Request,
    conversation_id: str,
    owner: Owner,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    await _conversation(request, owner, conversation_id)
    page = await _store(request).conversation_page(conversation_id, after, limit, order)
    if page is None:
        raise APIError(400, f"`after` names no item of this conversation: {after!r}.", param="after", code="invalid_value")
    return page.body()


@router.get("/conversations/{conversation_id}/items/{item_id}")
async def retrieve_item(request: Request, conversation_id: str, item_id: str, owner: Owner) -> dict[str, Any]:
    await _conversation(request, owner, conversation_id)
    item = await _store(request).get_conversation_item(conversation_id, item_id)
    if item is None:
        raise APIError(404, f"Item with id '{item_id}' not found.", param="item_id", code="not_found")
    return item


@router.delete("/conversations/{conversation_id}/items/{item_id}")
async def delete_item(request: Request, conversation_id: str, item_id: str, owner: Owner) -> dict[str, Any]:
    await _conversation(request, owner, conversation_id)
    if not await _store(request).delete_conversation_item(conversation_id, item_id):
        raise APIError(404, f"Item with id '{item_id}' not found.", param="item_id", code="not_found")
    return await _conversation(request, owner, conversation_id)


async def _conversation(request: Request, owner: str, conversation_id: str) -> dict[str, Any]:
    conversation = await _store(request).get_conversation(owner, conversation_id)
    if conversation is None:
        raise _not_found(conversation_id)
    return conversation


def _not_found(conversation_id: str) -> APIError:
    return APIError(404, f"Conversation with id '{conversation_id}' not found.", param="conversation_id",
                    code="not_found")  # fmt: skip


@contextmanager
def _unique_items() -> Iterator[None]:
    """An item id the conversation (or the request) holds already is the caller's error."""
    try:
        yield
    except DuplicateItem as exc:
        raise APIError(400, f"An item with id '{exc.item_id}' is already in this conversation.", param="items",
                       code="invalid_value") from None  # fmt: skip


def _items(raw: list[Any]) -> list[dict[str, Any]]:
    """New items must be well-formed: unlike a replayed history, a bad one is the caller's error."""
    items = []
    for position, item in enumerate(raw):
        normalized = normalize_item(item)
        if isinstance(normalized, str):
            raise APIError(400, f"Invalid item: {normalized}.", param=f"items[{position}]", code="invalid_value")
        items.append(normalized)
    return items
