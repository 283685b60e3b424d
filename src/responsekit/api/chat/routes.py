"""`POST /v1/chat/completions`, rendered from the same canonical stream as `/v1/responses`."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...canonical.server_tools import ServerToolSpecs
from ...canonical.sse import SSE_DONE, sse_data
from ...orchestration.rendering import drain, raise_for_error, rendered
from ..auth import allow_model, authorize
from ..callers import caller
from ..http import JSONResponse, read_body
from ..routing import plain_post
from ..streaming import event_stream, unless_disconnected
from .render import ChatRenderer
from .request import CreateChatCompletion, translate

log = logging.getLogger(__name__)
router = APIRouter()

MAX_SEARCHES = 8
"""Web tool calls one chat completion may make before the model must answer (the API has no
`max_tool_calls`)."""


@plain_post(router, "/chat/completions", CreateChatCompletion)
async def create_chat_completion(request: Request) -> Response:
    authorize(request)
    body = await read_body(request, CreateChatCompletion)
    allow_model(request, body.model)
    asking = caller(request, "/v1/chat/completions", body.stream)
    generation = translate(body)
    pipeline = request.app.state.pipeline
    specs = None
    if body.web_search_options is not None:
        web_search = body.web_search_spec()  # a malformed one is a 400, served or not
        if pipeline.web is None:
            log.warning("ignoring web_search_options: %s", request.app.state.web_search_off)
        else:
            specs = ServerToolSpecs(web_search=web_search, max_tool_calls=MAX_SEARCHES)
    turn = await pipeline.prepare(generation, asking, specs)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    served = frozenset(turn.served) if specs is not None else frozenset()
    renderer = ChatRenderer(body.model, include_usage=include_usage, server_tools=served)
    events = pipeline.events(turn, renderer.id)
    if body.stream:
        return event_stream(rendered(renderer, events, turn.observer), encode=sse_data, end=SSE_DONE)
    await unless_disconnected(request, drain(renderer, events, turn.observer))
    raise_for_error(renderer)
    return JSONResponse(renderer.completion)

