"""`POST /v1/responses`: streaming and not, both from one renderer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...errors import APIError
from ..http import SSE_DONE, drain, event_stream, raise_for_error, read_body, rendered, sse_event, unless_disconnected
from .render import ResponseRenderer
from .request import CreateResponse, initial_response, translate

router = APIRouter()

_NOT_YET = ("background", "previous_response_id", "conversation")


@router.post("/responses")
async def create_response(request: Request) -> Response:
    body = await read_body(request, CreateResponse)
    for key in _NOT_YET:
        if (body.model_extra or {}).get(key) or getattr(body, key, None):
            raise APIError(400, f"`{key}` is not supported by this server yet.", param=key, code="unsupported_parameter")
    translation = translate(body)
    upstream, translation.generation.model = await request.app.state.router.resolve(body.model)
    renderer = ResponseRenderer(initial_response(body, translation.toolset), translation.toolset)
    events = upstream.generate(translation.generation)
    if body.stream:
        return event_stream(_frames(rendered(renderer, events)))
    await unless_disconnected(request, drain(renderer, events))
    raise_for_error(renderer)
    return JSONResponse(renderer.response)


async def _frames(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        yield sse_event(event)
    yield SSE_DONE
