"""`POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API, stateless,
rendered from the same canonical stream as the other frontends.

Claude Code given `ANTHROPIC_BASE_URL=http://host:8400/v1` asks for `/v1/v1/messages`, so the
routes answer under a doubled `/v1` too. `?beta=true`, `anthropic-version` and `anthropic-beta`
are accepted and change nothing; the key comes as `x-api-key` or `Authorization: Bearer`.
Errors before the stream are HTTP errors in Anthropic's envelope; in it, an `error` event.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...canonical.sse import sse_event
from ...orchestration.rendering import drain, rendered
from ..auth import allow_model, authorize
from ..callers import caller
from ..http import JSONResponse, asks_anthropic, error_envelope, read_body
from ..models import list_models
from ..routing import PlainRoute, json_body, plain_post
from ..streaming import event_stream, unless_disconnected
from .code_execution import container_body, container_id, put_uploads
from .context_management import applied_edits
from .render import MessagesRenderer, error_message
from .render import error_envelope as anthropic_error
from .request import CreateMessage, MessageParams, translate

log = logging.getLogger(__name__)

router = APIRouter()

PING = sse_event({"type": "ping"})
CLAMPED_HEADER = "x-responsekit-max-tokens-clamped"
"""Set (to the limit used) when `max_tokens` was more than the engine's context leaves."""


@error_envelope("/v1/messages", "/messages", "/v1/v1/messages", words=error_message)
@error_envelope("/v1/models", "/models", "/v1/v1/models", "/v1/files", "/files", sent_by=asks_anthropic)
def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    return anthropic_error(status, message)


@plain_post(router, "/messages", CreateMessage)
async def create_message(request: Request) -> Response:
    authorize(request)
    body = await read_body(request, CreateMessage)
    allow_model(request, body.model)
    asking = caller(request, "/v1/messages", body.stream, busy_status=529)
    state = request.app.state
    pipeline, sealer = state.pipeline, state.orchestrator.sealer
    translation = translate(body, sealer, strip_billing_header=state.settings.strip_billing_header,
                            web_search=pipeline.web is not None)  # fmt: skip
    if translation.uploads:  # in the container before the model runs (code_execution.py)
        await put_uploads(state.containers, state.vector_stores, asking.owner, translation.server_tools.code[0],
                          translation.uploads)  # fmt: skip
    # The prompt is counted for `message_start` (exactly on in-process models, which also clamp
    # `max_tokens` to the context left).
    # `context_management`'s edits clear the history first.
    edits = translation.context_edits
    turn = await pipeline.prepare(translation.generation, asking, translation.server_tools, count_prompt=True,
                                  edits=edits or ())  # fmt: skip
    assert turn.input_tokens is not None
    container = container_id(turn.served)
    record = None if container is None else await state.containers.get(asking.owner, container)
    renderer = MessagesRenderer(body.model, input_tokens=turn.input_tokens, seal=lambda text: sealer.seal("reasoning", text),
                                show_thinking=translation.show_thinking, stop_sequences=translation.stop_sequences,
                                server_tools=turn.served, seal_result=lambda text: sealer.seal("web_search", text),
                                context_management=None if edits is None else applied_edits(turn.context_edits),
                                container=None if record is None else container_body(record))  # fmt: skip
    headers = {CLAMPED_HEADER: str(turn.clamped)} if turn.clamped is not None else {}
    events = pipeline.events(turn, renderer.id)
    if body.stream:
        return event_stream(rendered(renderer, events, turn.observer), encode=sse_event, heartbeat=PING, headers=headers)
    await unless_disconnected(request, drain(renderer, events, turn.observer))
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
    compacts its history by this count), else an estimate marked `estimated`. With
    `context_management`, the history its edits leave is counted, and the count before them is
    `original_input_tokens`, as Anthropic's API answers."""
    owner = authorize(request)
    body = await read_body(request, MessageParams)
    allow_model(request, body.model)
    translation = translate(body, request.app.state.orchestrator.sealer,
                            strip_billing_header=request.app.state.settings.strip_billing_header)  # fmt: skip
    pipeline = request.app.state.pipeline
    answer: dict[str, Any]
    if translation.context_edits is None:
        count, exact = await pipeline.count_tokens(translation.generation, owner)
        answer = {"input_tokens": count}
    else:
        count, exact, original = await pipeline.count_edited(translation.generation, owner, translation.context_edits)
        answer = {"input_tokens": count, "context_management": {"original_input_tokens": original}}
    return answer if exact else {**answer, "estimated": True}


@router.get("/v1/models", include_in_schema=False)
async def list_models_doubled(request: Request) -> dict[str, Any]:
    """`/v1/models` under a doubled `/v1`, for Claude Code's model discovery (this router comes
    after the models API's, whose `/v1/models` answers first)."""
    return await list_models(request, authorize(request))


