"""`POST /v1/chat/completions`, rendered from the same canonical stream as `/v1/responses`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...canonical.sse import SSE_DONE, sse_data
from ...operations import tracing
from ...orchestration.rendering import drain, raise_for_error, rendered
from ..auth import allow_model, authorize
from ..http import JSONResponse, read_body
from ..limits import metered
from ..metrics import observation
from ..routing import plain_post
from ..streaming import event_stream, unless_disconnected
from .render import ChatRenderer
from .request import CreateChatCompletion, translate

router = APIRouter()


@plain_post(router, "/chat/completions", CreateChatCompletion)
async def create_chat_completion(request: Request) -> Response:
    authorize(request)
    body = await read_body(request, CreateChatCompletion)
    allow_model(request, body.model)
    observed = observation(request, "/v1/chat/completions", body.stream)
    generation = translate(body)
    upstream, generation.model = await request.app.state.router.resolve(body.model)
    if observed is not None:
        observed.serving(generation.model, upstream.name)
    observed = await metered(request, observed, "/v1/chat/completions", generation.model, upstream,
                             generation.max_output_tokens)  # fmt: skip
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    renderer = ChatRenderer(body.model, include_usage=include_usage)
    events = tracing.generate(upstream, generation, renderer.id)
    if body.stream:
        return event_stream(_frames(rendered(renderer, events, observed)))
    await unless_disconnected(request, drain(renderer, events, observed))
    raise_for_error(renderer)
    return JSONResponse(renderer.completion)


async def _frames(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield sse_data(chunk)
    yield SSE_DONE
