"""`/v1/files`: upload (multipart), list, retrieve, delete, and the content of a file.

OpenAI's Files API; to an Anthropic client (its SDKs send `anthropic-version`), Anthropic's
(`files-api-2025-04-14`) for upload, metadata, download and delete: an upload needs no
`purpose`, a file is its `FileMetadata`, and the files code execution wrote in the key's
containers download by their ids (docs/code-execution.md, "Messages API code execution").
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile

from ..canonical.errors import APIError
from ..containers.service import Containers
from ..files.blobs import PIECE
from ..files.catalog import StoredFile
from ..files.service import VectorStores
from ..store import Page
from .auth import Owner
from .http import asks_anthropic

router = APIRouter()

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MULTIPART_SLACK = 64 * 1024
"""Room for the multipart envelope (boundaries, headers, `purpose`) above the file itself."""


def service(request: Request) -> VectorStores:
    return request.app.state.vector_stores


def file_metadata(
    file_id: str, filename: str, size: int, created_ms: int, expires_at: int | None = None
) -> dict[str, Any]:
    """Anthropic's `FileMetadata` (the `anthropic` SDK's `BetaFileMetadata`)."""
    body = {"id": file_id, "type": "file", "filename": filename, "size_bytes": size, "downloadable": True,
            "mime_type": mimetypes.guess_type(filename)[0] or "application/octet-stream",
            "created_at": _rfc3339(created_ms / 1000)}  # fmt: skip
    if expires_at is not None:
        body["expires_at"] = _rfc3339(expires_at)
    return body


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _stored(file: StoredFile) -> dict[str, Any]:
    return file_metadata(file.id, file.filename, file.bytes, file.created_ms, file.expires_at)


@router.post("/files")
async def upload(request: Request, owner: Owner) -> dict[str, Any]:
    limit: int = request.app.state.settings.max_file_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + MULTIPART_SLACK:
        raise _too_large(limit)
    form = await request.form(max_files=1, max_fields=8)
    try:
        file, purpose = form.get("file"), form.get("purpose")
        if not isinstance(file, UploadFile):
            raise APIError(400, "Missing required parameter: 'file' (a multipart file part).", param="file",
                           code="missing_required_parameter")  # fmt: skip
        if purpose is None and asks_anthropic(request):  # Anthropic's upload has no purpose
            purpose = "user_data"
        if not isinstance(purpose, str):
            raise APIError(400, "Missing required parameter: 'purpose'.", param="purpose",
                           code="missing_required_parameter")  # fmt: skip
        if purpose not in PURPOSES:
            raise APIError(400, f"Invalid value for 'purpose': expected one of {', '.join(PURPOSES)}.",
                           param="purpose", code="invalid_value")  # fmt: skip
        size = file.size if file.size is not None else 0
        if size > limit:
            raise _too_large(limit)
        filename = (file.filename or "").replace("\\", "/").rsplit("/", 1)[-1]
        if not filename:
            raise APIError(400, "The file part needs a filename.", param="file", code="invalid_value")
        stored = await service(request).add_file(owner, filename, purpose, size, _pieces(file),
                                                 _expires_after(form.get("expires_after[anchor]"),
                                                                form.get("expires_after[seconds]")))  # fmt: skip
    finally:
        await form.close()
    return _stored(stored) if asks_anthropic(request) else stored.body()


async def _pieces(file: UploadFile) -> AsyncIterator[bytes]:
    await file.seek(0)
    while piece := await file.read(PIECE):
        yield piece


def _expires_after(anchor: Any, seconds: Any) -> int | None:
    """`expires_after[anchor]=created_at` and `expires_after[seconds]=N` (3600 to 30 days), as OpenAI takes them."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise APIError(400, "expires_after[anchor] must be 'created_at'.", param="expires_after.anchor",
                       code="invalid_value")  # fmt: skip
    if not isinstance(seconds, str) or not seconds.isdigit() or not 3600 <= int(seconds) <= 2_592_000:
        raise APIError(400, "expires_after[seconds] must be an integer from 3600 to 2592000.",
                       param="expires_after.seconds", code="invalid_value")  # fmt: skip
    return int(seconds)


def _too_large(limit: int) -> APIError:
    return APIError(413, f"The file is larger than this server's limit of {limit} bytes.", param="file",
                    code="file_too_large")  # fmt: skip


@router.get("/files")
async def list_files(
    request: Request,
    owner: Owner,
    purpose: str | None = None,
    after: str | None = None,
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    order: Literal["asc", "desc"] = "desc",
    after_id: str | None = None,
    before_id: str | None = None,
    page: str | None = None,
) -> dict[str, Any]:
    if asks_anthropic(request):
        return await _anthropic_list(request, owner, limit, after_id, before_id, page)
    listed = await service(request).catalog.list_files(owner, purpose, after, limit or 10_000, order)
    if listed is None:
        raise APIError(400, f"`after` names no file of yours: {after!r}.", param="after", code="invalid_value")
    files, more = listed
    return Page([file.body() for file in files], more).body()


PAGE_PREFIX = "page_"


async def _anthropic_list(request: Request, owner: str, limit: int | None, after_id: str | None,
                          before_id: str | None, page: str | None) -> dict[str, Any]:  # fmt: skip
    """Anthropic's `GET /v1/files`, newest first: a page after `after_id` (or the opaque `page`
    cursor the `anthropic` SDK sends back from `next_page`) or before `before_id`, or the files
    `ids[]` names (one page, unknown ids left out). The answer carries both pagination forms
    Anthropic's clients read: `first_id`, `last_id` and `has_more`
    (https://platform.claude.com/docs/en/api/python/beta/files/list), and `next_page`."""
    ids = request.query_params.getlist("ids[]") or request.query_params.getlist("ids")
    catalog = service(request).catalog
    if ids:
        if len(set(ids)) > 100:
            raise APIError(400, "`ids` holds more than 100 ids.", param="ids", code="invalid_value")
        found = [await catalog.get_file(owner, file_id) for file_id in dict.fromkeys(ids)]
        files, more = [file for file in found if file is not None], False
    else:
        limit = 20 if limit is None else limit
        if limit > 1000:
            raise APIError(400, "`limit` must be from 1 to 1000.", param="limit", code="invalid_value")
        if page is not None:
            if not page.startswith(PAGE_PREFIX):
                raise APIError(400, f"`page` is not a page cursor: {page!r}.", param="page", code="invalid_value")
            after_id = page.removeprefix(PAGE_PREFIX)
        listed = await catalog.list_files(owner, None, after_id, limit, "desc", before_id)
        if listed is None:
            cursor = "before_id" if before_id is not None and after_id is None else "after_id"
            raise APIError(400, f"`{cursor}` names no file of yours: {after_id or before_id!r}.", param=cursor,
                           code="invalid_value")  # fmt: skip
        files, more = listed
    data = [_stored(file) for file in files]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    forward = before_id is None or after_id is not None
    return {"data": data, "first_id": first, "last_id": last, "has_more": more,
            "next_page": f"{PAGE_PREFIX}{last}" if more and forward and last else None}  # fmt: skip


@router.get("/files/{file_id}")
async def retrieve_file(request: Request, file_id: str, owner: Owner) -> dict[str, Any]:
    file = await service(request).catalog.get_file(owner, file_id)
    if file is not None:
        return _stored(file) if asks_anthropic(request) else file.body()
    if asks_anthropic(request):
        written = await containers(request).find_file(owner, file_id)
        if written is not None:
            return file_metadata(written.id, written.filename, written.bytes, written.created_ms)
    raise not_found(file_id)


@router.delete("/files/{file_id}")
async def delete_file(request: Request, file_id: str, owner: Owner) -> dict[str, Any]:
    if not await service(request).delete_file(owner, file_id):
        raise not_found(file_id)
    if asks_anthropic(request):
        return {"id": file_id, "type": "file_deleted"}
    return {"id": file_id, "object": "file", "deleted": True}


@router.get("/files/{file_id}/content")
async def file_content(request: Request, file_id: str, owner: Owner) -> Response:
    files = service(request)
    file = await files.catalog.get_file(owner, file_id)
    if file is None and asks_anthropic(request):  # a file code execution wrote
        written = await containers(request).find_file(owner, file_id)
        found = written and await containers(request).file_content(owner, written.container_id, written.id)
        if found:
            disposition = f"attachment; filename*=UTF-8''{quote(found[0].filename, safe='')}"
            return Response(found[1], media_type="application/octet-stream",
                            headers={"Content-Disposition": disposition})  # fmt: skip
    if file is None:
        raise not_found(file_id)
    disposition = f"attachment; filename*=UTF-8''{quote(file.filename, safe='')}"
    return StreamingResponse(files.blobs.read(file.blob), media_type="application/octet-stream",
                             headers={"Content-Length": str(file.bytes), "Content-Disposition": disposition})  # fmt: skip


def containers(request: Request) -> Containers:
    return request.app.state.containers


def not_found(file_id: str) -> APIError:
    return APIError(404, f"No such File object: {file_id}", param="id", code="not_found")
