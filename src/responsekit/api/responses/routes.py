"""`/v1/responses`: create (streaming, not, background), retrieve, resume, cancel, delete, list inputs."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ...canonical.errors import APIError
from ...canonical.ids import new_id
from ...canonical.sse import SSE_DONE, sse_event
from ...orchestration.items import normalize_items
from ...orchestration.orchestrator import Orchestrator
from ...orchestration.rendering import raise_for_error
from ...store import RUNNING, paginate
from ..auth import Owner, allow_model, authorize
from ..callers import caller
from ..http import JSONResponse, read_body
from ..routing import json_body, plain_post
from ..streaming import event_stream, unless_disconnected
from .render import usage_object
from .request import CreateResponse, translate

router = APIRouter()

Limit = Annotated[int, Query(ge=1, le=100)]
Order = Literal["asc", "desc"]


def orchestrator(request: Request) -> Orchestrator:
    return request.app.state.orchestrator


@plain_post(router, "/responses", CreateResponse)
async def create_response(request: Request) -> Response:
    return await create_for(request, authorize(request))


async def create_for(request: Request, owner: str) -> Response:
    """`POST /v1/responses` for `owner`, however the request proved it is theirs: a bearer key
    here, the inspector's session for the playground (`api/ui/playground.py`)."""
    body = await read_body(request, CreateResponse)
    allow_model(request, body.model)
    limit = request.app.state.settings.max_input_items
    if len(body.input_items) > limit:
        raise APIError(400, f"`input` has more than {limit} items.", param="input", code="invalid_value")
    asking = caller(request, "/v1/responses", body.stream and not body.background)
    conductor = orchestrator(request)
    prepared = await conductor.prepare(translate(body, conductor.sealer, conductor.pipeline.web is not None), owner,
                                       caller=asking)  # fmt: skip
    if body.background:
        run = await conductor.start_background(prepared)
        if body.stream:
            return event_stream(conductor.runs.follow(run.response_id, -1), end=SSE_DONE)
        return JSONResponse(prepared.response)
    if body.stream:
        return event_stream(conductor.events(prepared), encode=sse_event, end=SSE_DONE)

    async def drain() -> None:
        async for _ in conductor.events(prepared):
            pass

    await unless_disconnected(request, drain())
    raise_for_error(prepared.renderer)
    return JSONResponse(prepared.response)


class CompactRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    input: str | list[Any] = Field(default_factory=list)
    instructions: str | None = None
    previous_response_id: str | None = None


@router.post("/responses/compact", openapi_extra=json_body(CompactRequest))
async def compact(request: Request, owner: Owner) -> dict[str, Any]:
    """The history summarized into one compaction item; sent back as input, it restores the summary."""
    body = await read_body(request, CompactRequest)
    allow_model(request, body.model)
    conductor = orchestrator(request)
    items: list[dict[str, Any]] = []
    if body.instructions:
        items.append({"type": "message", "role": "developer", "content": body.instructions})
    if body.previous_response_id:
        history = await conductor.store.history(owner, body.previous_response_id)
        if history is None:
            raise APIError(404, f"Previous response with id '{body.previous_response_id}' not found.",
                           param="previous_response_id", code="previous_response_not_found")  # fmt: skip
        items += history
    raw = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    items += normalize_items(raw)
    if not any(item.get("type") != "message" or item.get("role") != "developer" for item in items):
        raise APIError(400, "Nothing to compact: give `input` or `previous_response_id`.", param="input",
                       code="invalid_value")  # fmt: skip
    item, usage = await conductor.compaction_item(body.model, items, owner)
    return {"id": new_id("resp"), "object": "response.compaction", "created_at": int(time.time()),
            "output": [item], "usage": usage_object(usage)}  # fmt: skip


@router.post("/responses/input_tokens", openapi_extra=json_body(CreateResponse))
async def count_input_tokens(request: Request, owner: Owner) -> dict[str, Any]:
    """Exact when the engine can tokenize (llama.cpp, vLLM, SGLang), else an estimate marked as such."""
    body = await read_body(request, CreateResponse)
    allow_model(request, body.model)
    conductor = orchestrator(request)
    prepared = await conductor.prepare(translate(body, conductor.sealer, conductor.pipeline.web is not None), owner)
    count, exact = await prepared.turn.upstream.count_tokens(prepared.turn.generation)
    return {"object": "response.input_tokens", "input_tokens": count, "estimated": not exact}


@router.get("/responses/{response_id}")
async def retrieve_response(
    request: Request,
    response_id: str,
    owner: Owner,
    stream: bool = False,
    starting_after: Annotated[int, Query(ge=-1, le=2**31 - 1)] = -1,  # events' sequence numbers are INTEGERs
) -> Response:
    response = await _stored(request, owner, response_id)
    if not stream:
        include = request.query_params.getlist("include[]") + request.query_params.getlist("include")
        if "reasoning.encrypted_content" in include:
            sealer = orchestrator(request).sealer
            for item in response["output"]:
                if item["type"] == "reasoning":
                    text = "".join(part.get("text", "") for part in item.get("content") or ())
                    item["encrypted_content"] = sealer.seal("reasoning", text)
        return JSONResponse(response)
    if not response.get("background"):
        raise APIError(400, "Only background responses can be streamed again.", param="stream", code="invalid_value")
    return event_stream(orchestrator(request).runs.follow(response_id, starting_after), end=SSE_DONE)


@router.delete("/responses/{response_id}")
async def delete_response(request: Request, response_id: str, owner: Owner) -> dict[str, Any]:
    conductor = orchestrator(request)
    response = await _stored(request, owner, response_id)
    if response["status"] in RUNNING:
        await conductor.runs.cancel(owner, response_id)
    await conductor.store.delete_response(owner, response_id)
    return {"id": response_id, "object": "response", "deleted": True}


@router.post("/responses/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str, owner: Owner) -> dict[str, Any]:
    """Stop a background response; cancelling a finished one returns it unchanged."""
    conductor = orchestrator(request)
    response = await _stored(request, owner, response_id)
    if response["status"] not in RUNNING:
        return response
    await conductor.runs.cancel(owner, response_id)
    for _ in range(100):  # a run on another replica is told at once (or notices within a sixth of a lease)
        response = await _stored(request, owner, response_id)
        if response["status"] not in RUNNING:
            break
        await asyncio.sleep(0.1)
    return response


@router.get("/responses/{response_id}/input_items")
async def list_input_items(
    request: Request,
    response_id: str,
    owner: Owner,
    after: str | None = None,
    limit: Limit = 20,
    order: Order = "desc",
) -> dict[str, Any]:
    items = await orchestrator(request).store.input_items(owner, response_id)
    if items is None:
        raise _not_found(response_id)
    return paginate(items, after, limit, order).body()


async def _stored(request: Request, owner: str, response_id: str) -> dict[str, Any]:
    response = await orchestrator(request).store.get_response(owner, response_id)
    if response is None:
        raise _not_found(response_id)
    return response


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id '{response_id}' not found.", param="response_id", code="not_found")

