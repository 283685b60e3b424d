"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API, stateless,
rendered from the same canonical stream as the other frontends.

Claude Code given `ANTHROPIC_BASE_URL=http://host:8400/v1` asks for `/v1/v1/messages`, so the
routes answer under a doubled `/v1` too. `?beta=true`, `anthropic-version` and `anthropic-beta`
are accepted and change nothing; the key comes as `x-api-key` or `Authorization: Bearer`.
Errors before the stream are HTTP errors in Anthropic's envelope; in it, an `error` event.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...backends import Backend
from ...canonical.conversation import GenerationRequest, NamedToolChoice, TextPart
from ...canonical.sse import sse_event
from ...orchestration.rendering import drain, rendered
from ...orchestration.tool_loop import with_server_tools
from ...tools import ServerTools
from ...tools.names import ToolOrigin, ToolSet
from ...tools.web.fetch_tool import FETCH, add_web_fetch, context_urls
from ...tools.web.tool import NAMESPACE as WEB
from ...tools.web.tool import SEARCH, add_web_search
from ..auth import allow_model, authorize
from ..http import JSONResponse, error_envelope, read_body
from ..limits import metered
from ..metrics import observation
from ..models import list_models
from ..routing import PlainRoute, json_body, plain_post
from ..streaming import event_stream, unless_disconnected
from .render import MessagesRenderer, error_message
from .render import error_envelope as anthropic_error
from .request import CreateMessage, MessageParams, translate

log = logging.getLogger(__name__)

router = APIRouter()

PING = sse_event({"type": "ping"})
CLAMPED_HEADER = "x-responsekit-max-tokens-clamped"
"""Set (to the limit used) when `max_tokens` was more than the engine's context leaves."""


@error_envelope("/v1/messages", "/messages", "/v1/v1/messages")
def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    return anthropic_error(status, message)


@plain_post(router, "/messages", CreateMessage)
async def create_message(request: Request) -> Response:
    authorize(request)
    body = await read_body(request, CreateMessage)
    allow_model(request, body.model)
    observed = observation(request, "/v1/messages", body.stream)
    state = request.app.state
    sealer = state.orchestrator.sealer
    web = state.web_search
    translation = translate(body, sealer, strip_billing_header=state.settings.strip_billing_header,
                            web_search=web is not None)  # fmt: skip
    generation = translation.generation
    toolset, server_tools = ToolSet(), ServerTools()
    server_run = [spec for spec in (translation.web_search, translation.web_fetch) if spec is not None]
    if server_run:
        toolset.add([(ToolOrigin("function", tool.name), tool) for tool in generation.tools])
        if translation.web_search is not None:
            add_web_search(server_tools, translation.web_search, web)
        if translation.web_fetch is not None:
            texts = [part.text for message in generation.messages if message.role in ("user", "tool")
                     for part in message.content if isinstance(part, TextPart)]  # fmt: skip
            add_web_fetch(server_tools, translation.web_fetch, web, context_urls(texts))
        toolset.add(server_tools.functions)
        generation.tools = toolset.offered()
        for function in (SEARCH, FETCH):  # a server tool forced: by the name the model knows
            if generation.tool_choice == NamedToolChoice(function):
                generation.tool_choice = NamedToolChoice(toolset.model_name(function, WEB))
    upstream, generation.model = await state.router.resolve(body.model)
    if observed is not None:
        observed.serving(generation.model, upstream.name)
    generation = await state.attachments.prepare(upstream, generation)
    input_tokens, clamped = await _input_tokens(upstream, generation)
    served = {name: origin.kind for name, origin in toolset.origins.items() if origin.server_side}
    observed = await metered(request, observed, "/v1/messages", generation.model, upstream,
                             generation.max_output_tokens)  # fmt: skip
    renderer = MessagesRenderer(body.model, input_tokens=input_tokens, seal=lambda text: sealer.seal("reasoning", text),
                                show_thinking=translation.show_thinking, stop_sequences=translation.stop_sequences,
                                server_tools=served, seal_result=lambda text: sealer.seal("web_search", text))  # fmt: skip
    headers = {CLAMPED_HEADER: str(clamped)} if clamped is not None else {}
    if not server_run:
        events = state.attachments.generate(upstream, generation, renderer.id)
    else:  # the loop of server-run tools (orchestration/tool_loop.py), bounded by the tools' `max_uses`
        uses = [spec.get("max_uses") for spec in server_run]
        events = with_server_tools(generation, toolset, server_tools,
                                   lambda turn: state.attachments.generate(upstream, turn, renderer.id),
                                   None if None in uses else sum(uses))  # fmt: skip
    if body.stream:
        return event_stream(_frames(rendered(renderer, events, observed)), heartbeat=PING, headers=headers)
    await unless_disconnected(request, drain(renderer, events, observed))
    if renderer.error is not None:
        error = renderer.error
        return JSONResponse(anthropic_error(error.status, error_message(error)), status_code=error.status)
    return JSONResponse(renderer.message, headers=headers)


# Claude Code with a base URL ending in /v1 doubles it.
router.add_api_route("/v1/messages", create_message, methods=["POST"], include_in_schema=False,
                     route_class_override=PlainRoute)  # fmt: skip


@router.post("/messages/count_tokens", openapi_extra=json_body(MessageParams))
@router.post("/v1/messages/count_tokens", include_in_schema=False)
async def count_tokens(request: Request) -> dict[str, Any]:
    """Exact where the engine tokenizes (in-process models, llama.cpp, vLLM, SGLang: Claude Code
    compacts its history by this count), else an estimate marked `estimated`."""
    authorize(request)
    body = await read_body(request, MessageParams)
    allow_model(request, body.model)
    translation = translate(body, request.app.state.orchestrator.sealer,
                            strip_billing_header=request.app.state.settings.strip_billing_header)  # fmt: skip
    upstream, translation.generation.model = await request.app.state.router.resolve(body.model)
    generation = await request.app.state.attachments.prepare(upstream, translation.generation)
    count, exact = await upstream.count_tokens(generation)
    return {"input_tokens": count} if exact else {"input_tokens": count, "estimated": True}


@router.get("/v1/models", include_in_schema=False)
async def list_models_doubled(request: Request) -> dict[str, Any]:
    """`/v1/models` under a doubled `/v1`, for Claude Code's model discovery (this router comes
    after the models API's, whose `/v1/models` answers first)."""
    return await list_models(request, authorize(request))


async def _input_tokens(upstream: Backend, generation: GenerationRequest) -> tuple[int, int | None]:
    """The prompt's tokens for `message_start`, and the clamped `max_tokens` if it had to be.

    A backend that knows its context (an in-process model) counts exactly and cheaply: a `max_tokens`
    above what the context leaves (Claude Code asks 32k-64k) is clamped, and said so in a
    header and the log, never refused. Other engines would need a request to count: the count
    is estimated here (`message_delta` then carries the engine's own), and `max_tokens` goes
    to the engine as asked.
    """
    if upstream.context_window is not None:
        count, _ = await upstream.count_tokens(generation)
        room = upstream.context_window - count
        wanted = generation.max_output_tokens
        if wanted is not None and room > 0 and wanted > room:
            log.info("max_tokens %d is more than the %d tokens model %s has left after the prompt: clamped",
                     wanted, room, generation.model)  # fmt: skip
            generation.max_output_tokens = room
            return count, room
        return count, None
    return _estimate(generation), None


def _estimate(generation: GenerationRequest) -> int:
    """About four characters a token, over everything the prompt holds."""
    characters = sum(len(m.text()) + len(m.reasoning or "") + sum(len(c.arguments) + len(c.name) for c in m.tool_calls)
                     for m in generation.messages)  # fmt: skip
    characters += sum(len(t.name) + len(t.description or "") + len(str(t.parameters or "")) for t in generation.tools)
    return max(1, characters // 4)


async def _frames(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        yield sse_event(event)

