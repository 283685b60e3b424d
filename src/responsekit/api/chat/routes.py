"""`POST /v1/chat/completions`, rendered from the same canonical stream as `/v1/responses`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...canonical.sse import SSE_DONE, sse_data
from ...orchestration.rendering import drain, raise_for_error, rendered
from ...orchestration.tool_loop import with_server_tools
from ...tools import ServerTools
from ...tools.names import ToolOrigin, ToolSet
from ...tools.web.tool import add_web_search
from ..auth import allow_model, authorize
from ..http import JSONResponse, read_body
from ..limits import metered
from ..metrics import observation
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
    owner = authorize(request)
    body = await read_body(request, CreateChatCompletion)
    allow_model(request, body.model)
    observed = observation(request, "/v1/chat/completions", body.stream)
    generation = translate(body)
    web_spec = body.web_search_spec()
    upstream, generation.model = await request.app.state.router.resolve(body.model)
    attachments = request.app.state.attachments
    generation = await attachments.prepare(upstream, generation, owner)
    if observed is not None:
        observed.serving(generation.model, upstream.name)
    observed = await metered(request, observed, "/v1/chat/completions", generation.model, upstream,
                             generation.max_output_tokens)  # fmt: skip
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    web = request.app.state.web_search
    if web_spec is not None and web is None:
        log.warning("ignoring web_search_options: %s", request.app.state.web_search_off)
    if web_spec is None or web is None:
        renderer = ChatRenderer(body.model, include_usage=include_usage)
        events = attachments.generate(upstream, generation, renderer.id)
    else:
        # The same loop as the Responses API's server-run tools, with the web functions added.
        toolset, server_tools = ToolSet(), ServerTools()
        toolset.add([(ToolOrigin("function", tool.name), tool) for tool in generation.tools])
        add_web_search(server_tools, web_spec, web)
        toolset.add(server_tools.functions)
        generation.tools = toolset.offered()
        served = frozenset(name for name, origin in toolset.origins.items() if origin.server_side)
        renderer = ChatRenderer(body.model, include_usage=include_usage, server_tools=served)
        events = with_server_tools(generation, toolset, server_tools,
                                   lambda turn: attachments.generate(upstream, turn, renderer.id), MAX_SEARCHES)  # fmt: skip
    if body.stream:
        return event_stream(_frames(rendered(renderer, events, observed)))
    await unless_disconnected(request, drain(renderer, events, observed))
    raise_for_error(renderer)
    return JSONResponse(renderer.completion)


async def _frames(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield sse_data(chunk)
    yield SSE_DONE
