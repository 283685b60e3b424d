"""`/v1/containers`: containers and their files, as the `openai` SDK's `containers` and
`containers.files` resources call them. The work is in `containers/service.py`."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr
from starlette.datastructures import UploadFile

from ..canonical.errors import APIError
from ..containers.service import Containers, not_found
from .auth import Owner
from .files import MULTIPART_SLACK
from .http import read_body

router = APIRouter()


class CreateContainer(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: StrictStr
    file_ids: list[StrictStr] = Field(default_factory=list, max_length=500)
    memory_limit: StrictStr | None = None
    expires_after: dict[str, Any] | None = None
    """Checked by `Containers.create`, as the server-run tools' `container: {"type": "auto"}` is."""
    network_policy: dict[str, Any] | None = None
    skills: list[Any] | None = None


class AddFile(BaseModel):
    model_config = ConfigDict(extra="allow")
    file_id: StrictStr


def service(request: Request) -> Containers:
    return request.app.state.containers


@router.post("/containers")
async def create(request: Request, owner: Owner) -> dict[str, Any]:
    body = await read_body(request, CreateContainer)
    if body.skills:
        raise APIError(
            400,
            "Skills are not supported by this server.",
            param="skills",
            code="unsupported_parameter",
        )
    return await service(request).create(owner, name=body.name, file_ids=body.file_ids,
                                         memory_limit=body.memory_limit, expires_after=body.expires_after,
                                         network_policy=body.network_policy)  # fmt: skip


@router.get("/containers")
async def list_containers(
    request: Request,
    owner: Owner,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    name: str | None = None,
) -> dict[str, Any]:
    page = await service(request).list(owner, after, limit, order, name)
    if page is None:
        raise _bad_cursor(after)
    return page.body()


@router.get("/containers/{container_id}")
async def retrieve(request: Request, container_id: str, owner: Owner) -> dict[str, Any]:
    container = await service(request).get(owner, container_id)
    if container is None:
        raise not_found(container_id)
    return container


@router.delete("/containers/{container_id}")
async def delete(request: Request, container_id: str, owner: Owner) -> dict[str, Any]:
    if not await service(request).delete(owner, container_id):
        raise not_found(container_id)
    return {"id": container_id, "object": "container.deleted", "deleted": True}


# --- files -----------------------------------------------------------------------------------


@router.post("/containers/{container_id}/files")
async def add_file(request: Request, container_id: str, owner: Owner) -> dict[str, Any]:
    """A multipart upload (`file`), or JSON naming a Files API file (`file_id`)."""
    containers = service(request)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        body = await read_body(request, AddFile)
        return (await containers.add_file_id(owner, container_id, body.file_id)).body()
    limit: int = request.app.state.settings.max_file_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + MULTIPART_SLACK:
        raise _too_large(limit)
    form = await request.form(max_files=1, max_fields=8)
    try:
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise APIError(400, "Missing required parameter: 'file' (a multipart file part) or 'file_id'.",
                           param="file", code="missing_required_parameter")  # fmt: skip
        if file.size is not None and file.size > limit:
            raise _too_large(limit)
        data = await file.read()
        stored = await containers.add_file(
            owner, container_id, data=data, filename=file.filename or ""
        )
    finally:
        await form.close()
    return stored.body()


@router.get("/containers/{container_id}/files")
async def list_files(
    request: Request,
    container_id: str,
    owner: Owner,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    page = await service(request).list_files(owner, container_id, after, limit, order)
    if page is None:
        raise _bad_cursor(after)
    return page.body()


@router.get("/containers/{container_id}/files/{file_id}")
async def retrieve_file(
    request: Request, container_id: str, file_id: str, owner: Owner
) -> dict[str, Any]:
    file = await service(request).get_file(owner, container_id, file_id)
    if file is None:
        raise _file_not_found(file_id)
    return file.body()


@router.get("/containers/{container_id}/files/{file_id}/content")
async def file_content(request: Request, container_id: str, file_id: str, owner: Owner) -> Response:
    found = await service(request).file_content(owner, container_id, file_id)
    if found is None:
        raise _file_not_found(file_id)
    file, data = found
    disposition = f"attachment; filename*=UTF-8''{quote(file.filename, safe='')}"
    return Response(
        data, media_type="application/octet-stream", headers={"Content-Disposition": disposition}
    )


@router.delete("/containers/{container_id}/files/{file_id}")
async def delete_file(
    request: Request, container_id: str, file_id: str, owner: Owner
) -> dict[str, Any]:
    if not await service(request).delete_file(owner, container_id, file_id):
        raise _file_not_found(file_id)
    return {"id": file_id, "object": "container.file.deleted", "deleted": True}


def _file_not_found(file_id: str) -> APIError:
    return APIError(
        404, f"Container file with id '{file_id}' not found.", param="file_id", code="not_found"
    )


def _bad_cursor(after: str | None) -> APIError:
    return APIError(
        400,
        f"`after` names no object of this list: {after!r}.",
        param="after",
        code="invalid_value",
    )


def _too_large(limit: int) -> APIError:
    return APIError(413, f"The file is larger than this server's limit of {limit} bytes.", param="file",
                    code="file_too_large")  # fmt: skip
