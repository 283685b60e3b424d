"""`/v1/vector_stores`: stores, their files and file batches, and search."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from ..canonical.errors import APIError
from ..canonical.ids import new_id, storable
from ..files.chunking import strategy
from ..files.extract import ExtractionError, extract_text
from ..files.service import VectorStores, not_found
from .auth import Owner
from .http import read_body

router = APIRouter()

Attributes = dict[str, Any] | None
"""Checked by `_check_attributes` (values: strings, numbers, booleans)."""
Status = Literal["in_progress", "completed", "failed", "cancelled"]


class ExpiresAfter(BaseModel):
    anchor: Literal["last_active_at"]
    days: StrictInt = Field(ge=1, le=365)


class CreateStore(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: StrictStr = ""
    file_ids: list[StrictStr] = Field(default_factory=list, max_length=500)
    metadata: dict[str, StrictStr] | None = Field(default=None, max_length=16)
    chunking_strategy: dict[str, Any] | None = None
    expires_after: ExpiresAfter | None = None


class UpdateStore(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: StrictStr | None = None
    metadata: dict[str, StrictStr] | None = Field(default=None, max_length=16)
    expires_after: ExpiresAfter | None = None


class AddFile(BaseModel):
    model_config = ConfigDict(extra="allow")
    file_id: StrictStr
    attributes: Attributes = None
    chunking_strategy: dict[str, Any] | None = None


class UpdateFile(BaseModel):
    model_config = ConfigDict(extra="allow")
    attributes: Attributes


class BatchFile(BaseModel):
    file_id: StrictStr
    attributes: Attributes = None
    chunking_strategy: dict[str, Any] | None = None


class CreateBatch(BaseModel):
    model_config = ConfigDict(extra="allow")
    file_ids: list[StrictStr] | None = Field(default=None, min_length=1, max_length=2000)
    files: list[BatchFile] | None = Field(default=None, min_length=1, max_length=2000)
    attributes: Attributes = None
    chunking_strategy: dict[str, Any] | None = None


class Search(BaseModel):
    model_config = ConfigDict(extra="allow")
    query: Any = None
    """Checked by `VectorStores.search` (a pydantic error on a field named `query` would lose its name)."""
    max_num_results: StrictInt = 10
    filters: dict[str, Any] | None = None
    ranking_options: dict[str, Any] | None = None
    rewrite_query: StrictBool = False


def service(request: Request) -> VectorStores:
    return request.app.state.vector_stores


# --- vector stores ---------------------------------------------------------------------------


@router.post("/vector_stores")
async def create_store(request: Request, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, CreateStore)
    _check_name(body.name)
    _check_metadata(body.metadata)
    chunking = strategy(body.chunking_strategy)
    stores = service(request)
    store_id = new_id("vs")
    await stores.catalog.add_store(owner, {
        "id": store_id, "created_ms": time.time_ns() // 1_000_000, "name": body.name, "metadata": body.metadata or {},
        "expires_after_days": body.expires_after.days if body.expires_after else None,
        "last_active_at": int(time.time()),
    })  # fmt: skip
    if body.file_ids:
        try:
            await stores.attach(owner, store_id, [(file_id, {}, chunking) for file_id in body.file_ids])
        except APIError:
            await stores.delete_store(owner, store_id)  # All or nothing: no store with a missing file.
            raise
    return await _store(request, owner, store_id)


@router.get("/vector_stores")
async def list_stores(
    request: Request,
    owner: Owner,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    page = await service(request).catalog.list_stores(owner, after, before, limit, order)
    if page is None:
        raise _bad_cursor(after or before)
    return page.body()


@router.get("/vector_stores/{vector_store_id}")
async def retrieve_store(request: Request, vector_store_id: str, owner: Owner) -> dict[str, Any]:
    return await _store(request, owner, vector_store_id)


@router.post("/vector_stores/{vector_store_id}")
async def update_store(request: Request, vector_store_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, UpdateStore)
    _check_name(body.name)
    _check_metadata(body.metadata)
    await _store(request, owner, vector_store_id)
    changes: dict[str, Any] = {}
    if body.name is not None:
        changes["name"] = body.name
    if body.metadata is not None:
        changes["metadata"] = body.metadata
    if "expires_after" in body.model_fields_set:
        changes["expires_after_days"] = body.expires_after.days if body.expires_after else None
    await service(request).catalog.update_store(owner, vector_store_id, changes)
    return await _store(request, owner, vector_store_id)


@router.delete("/vector_stores/{vector_store_id}")
async def delete_store(request: Request, vector_store_id: str, owner: Owner) -> dict[str, Any]:
    if not await service(request).delete_store(owner, vector_store_id):
        raise not_found(vector_store_id)
    return {"id": vector_store_id, "object": "vector_store.deleted", "deleted": True}


@router.post("/vector_stores/{vector_store_id}/search")
async def search(request: Request, vector_store_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, Search)
    hits = await service(request).search(owner, [vector_store_id], body.query, body.max_num_results, body.filters,
                                         body.ranking_options)  # fmt: skip
    queries = [body.query] if isinstance(body.query, str) else list(body.query)
    return {"object": "vector_store.search_results.page", "search_query": queries,
            "data": [hit.body() for hit in hits], "has_more": False, "next_page": None}  # fmt: skip


# --- files of a vector store -----------------------------------------------------------------


@router.post("/vector_stores/{vector_store_id}/files")
async def add_file(request: Request, vector_store_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, AddFile)
    attributes = _check_attributes(body.attributes)
    chunking = strategy(body.chunking_strategy)
    await _store(request, owner, vector_store_id)
    await service(request).attach(owner, vector_store_id, [(body.file_id, attributes, chunking)])
    return await _file(request, vector_store_id, body.file_id)


@router.get("/vector_stores/{vector_store_id}/files")
async def list_files(
    request: Request,
    vector_store_id: str,
    owner: Owner,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    filter: Status | None = None,
) -> dict[str, Any]:
    await _store(request, owner, vector_store_id)
    return await _files_page(request, vector_store_id, None, filter, after, before, limit, order)


@router.get("/vector_stores/{vector_store_id}/files/{file_id}")
async def retrieve_file(request: Request, vector_store_id: str, file_id: str, owner: Owner) -> dict[str, Any]:
    await _store(request, owner, vector_store_id)
    return await _file(request, vector_store_id, file_id)


@router.post("/vector_stores/{vector_store_id}/files/{file_id}")
async def update_file(request: Request, vector_store_id: str, file_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, UpdateFile)
    attributes = _check_attributes(body.attributes)
    await _store(request, owner, vector_store_id)
    await _file(request, vector_store_id, file_id)
    await service(request).catalog.set_attributes(vector_store_id, file_id, attributes)
    return await _file(request, vector_store_id, file_id)


@router.delete("/vector_stores/{vector_store_id}/files/{file_id}")
async def delete_file(request: Request, vector_store_id: str, file_id: str, owner: Owner) -> dict[str, Any]:
    await _store(request, owner, vector_store_id)
    if not await service(request).detach(vector_store_id, file_id):
        raise _file_not_found(vector_store_id, file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


@router.get("/vector_stores/{vector_store_id}/files/{file_id}/content")
async def file_content(request: Request, vector_store_id: str, file_id: str, owner: Owner) -> dict[str, Any]:
    """The file's text as the store extracted it."""
    await _store(request, owner, vector_store_id)
    await _file(request, vector_store_id, file_id)
    stores = service(request)
    file = await stores.catalog.get_file(owner, file_id)
    if file is None:
        raise _file_not_found(vector_store_id, file_id)
    data = b"".join([piece async for piece in stores.blobs.read(file.blob)])
    try:
        text = extract_text(file.filename, data)
    except ExtractionError as exc:
        raise APIError(400, exc.message, param="file_id", code=exc.code) from None
    return {"object": "vector_store.file_content.page", "data": [{"type": "text", "text": text}],
            "has_more": False, "next_page": None}  # fmt: skip


# --- file batches ----------------------------------------------------------------------------


@router.post("/vector_stores/{vector_store_id}/file_batches")
async def create_batch(request: Request, vector_store_id: str, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, CreateBatch)
    if (body.file_ids is None) == (body.files is None):
        raise APIError(400, "Give exactly one of file_ids and files.", param="file_ids", code="invalid_value")
    if body.files is not None:
        files = [(f.file_id, _check_attributes(f.attributes, f"files[{i}].attributes"),
                  strategy(f.chunking_strategy, f"files[{i}].chunking_strategy"))
                 for i, f in enumerate(body.files)]  # fmt: skip
    else:
        attributes, chunking = _check_attributes(body.attributes), strategy(body.chunking_strategy)
        files = [(file_id, attributes, chunking) for file_id in body.file_ids or ()]
    await _store(request, owner, vector_store_id)
    batch_id = await service(request).attach(owner, vector_store_id, files, batch=True)
    assert batch_id is not None
    return await _batch(request, vector_store_id, batch_id)


@router.get("/vector_stores/{vector_store_id}/file_batches/{batch_id}")
async def retrieve_batch(request: Request, vector_store_id: str, batch_id: str, owner: Owner) -> dict[str, Any]:
    await _store(request, owner, vector_store_id)
    return await _batch(request, vector_store_id, batch_id)


@router.post("/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel")
async def cancel_batch(request: Request, vector_store_id: str, batch_id: str, owner: Owner) -> dict[str, Any]:
    await _store(request, owner, vector_store_id)
    batch = await _batch(request, vector_store_id, batch_id)
    if batch["status"] == "in_progress":
        await service(request).catalog.cancel_batch(batch_id)
    return await _batch(request, vector_store_id, batch_id)


@router.get("/vector_stores/{vector_store_id}/file_batches/{batch_id}/files")
async def list_batch_files(
    request: Request,
    vector_store_id: str,
    batch_id: str,
    owner: Owner,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    filter: Status | None = None,
) -> dict[str, Any]:
    await _store(request, owner, vector_store_id)
    await _batch(request, vector_store_id, batch_id)
    return await _files_page(request, vector_store_id, batch_id, filter, after, before, limit, order)


# --- shared ----------------------------------------------------------------------------------


async def _store(request: Request, owner: str, vector_store_id: str) -> dict[str, Any]:
    store = await service(request).catalog.get_store(owner, vector_store_id)
    if store is None:
        raise not_found(vector_store_id)
    return store


async def _file(request: Request, vector_store_id: str, file_id: str) -> dict[str, Any]:
    file = await service(request).catalog.get_store_file(vector_store_id, file_id)
    if file is None:
        raise _file_not_found(vector_store_id, file_id)
    return file


async def _batch(request: Request, vector_store_id: str, batch_id: str) -> dict[str, Any]:
    batch = await service(request).catalog.get_batch(vector_store_id, batch_id)
    if batch is None:
        raise APIError(404, f"No file batch found with id '{batch_id}'.", param="batch_id", code="not_found")
    return batch


async def _files_page(
    request: Request, vector_store_id: str, batch_id: str | None, status: str | None, after: str | None,
    before: str | None, limit: int, order: Literal["asc", "desc"],
) -> dict[str, Any]:
    page = await service(request).catalog.list_store_files(vector_store_id, batch_id, status, after, before, limit, order)
    if page is None:
        raise _bad_cursor(after or before)
    return page.body()


def _file_not_found(vector_store_id: str, file_id: str) -> APIError:
    return APIError(404, f"No file found with id '{file_id}' in vector store '{vector_store_id}'.",
                    param="file_id", code="not_found")  # fmt: skip


def _bad_cursor(cursor: str | None) -> APIError:
    return APIError(400, f"The cursor names no object of this list: {cursor!r}.", param="after", code="invalid_value")


def _check_name(name: str | None) -> None:
    """The name is a column of its own (metadata and attributes are stored as escaped JSON)."""
    if name is not None and not storable(name):
        raise APIError(400, "The name cannot hold a NUL or a lone surrogate.", param="name", code="invalid_value")


def _check_metadata(metadata: dict[str, str] | None) -> None:
    for key, value in (metadata or {}).items():
        if len(key) > 64 or len(value) > 512:
            raise APIError(400, "Metadata keys are at most 64 characters and values at most 512.", param="metadata",
                           code="invalid_value")  # fmt: skip


def _check_attributes(attributes: dict[str, Any] | None, param: str = "attributes") -> dict[str, Any]:
    attributes = attributes or {}
    if len(attributes) > 16:
        raise APIError(400, "At most 16 attributes.", param=param, code="invalid_value")
    for key, value in attributes.items():
        if not isinstance(value, (str, int, float, bool)):
            raise APIError(400, "Attribute values are strings, numbers or booleans.", param=f"{param}.{key}",
                           code="invalid_type")  # fmt: skip
        if len(key) > 64 or (isinstance(value, str) and len(value) > 512):
            raise APIError(400, "Attribute keys are at most 64 characters and string values at most 512.",
                           param=param, code="invalid_value")  # fmt: skip
    return attributes
