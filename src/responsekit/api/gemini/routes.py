"""Google's Gemini API: `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`
and `:countTokens`, `GET /v1beta/models` and `GET /v1beta/models/{model}`; stateless, rendered
from the same canonical stream as the other frontends.

`:streamGenerateContent?alt=sse` streams server-sent events of `data:` lines only (the SDKs
read any other line as the start of an error body); without `alt=sse` it streams Google's JSON
array, one response per element. The same routes answer under `/v1` (the Python SDK's default
`api_version`) and `/v1alpha`, and under `/v1/v1` and `/v1/v1beta` (a base URL given with `/v1`). The key comes as
`x-goog-api-key`, `?key=` or `Authorization: Bearer` (`api/auth.py`). Errors before the stream
are HTTP errors in Google's envelope; in it, a last element `{"error": {...}}`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ...canonical.sse import json_bytes, sse_data
from ...orchestration.rendering import drain, rendered
from ..auth import Owner, allow_model, authorize
from ..callers import caller
from ..http import JSONResponse, asks_anthropic, error_envelope, read_body
from ..models import anthropic_model
from ..routing import PlainRoute, json_body
from ..streaming import SSE_HEADERS, EventStreamResponse, event_stream, unless_disconnected
from .models import asks_google, model_page, one_model, served
from .render import GeminiRenderer, error_message
from .render import error_envelope as google_error
from .request import CountTokensRequest, GenerateContentRequest, invalid, translate

log = logging.getLogger(__name__)

router = APIRouter()

VERSIONS = ("/v1beta", "/v1", "/v1alpha", "/v1/v1beta", "/v1/v1")
"""The path prefixes the routes answer under; the first is documented. The Python SDK asks `/v1`
by default, and `/v1/v1` when given a base URL ending in `/v1`."""
CLAMPED_HEADER = "x-responsekit-max-tokens-clamped"
"""Set (to the limit used) when `maxOutputTokens` was more than the engine's context leaves."""
ESTIMATED_HEADER = "x-responsekit-estimated"
"""Set on a `:countTokens` answer the engine could not count exactly (Google's body has no place for it)."""


def _google_client(request: Request) -> bool:
    """Google's clients on the models API's `/v1` paths, which OpenAI's and Anthropic's ask too;
    a POST below `/v1/models/` is one of Google's `:generateContent` methods."""
    return asks_google(request) or (request.method == "POST" and "/models/" in request.url.path)


@error_envelope("/v1beta", "/v1alpha", "/v1/v1beta", words=error_message)
@error_envelope("/v1/models", "/v1/v1/models", words=error_message, sent_by=_google_client)
def _google_error(status: int, message: str) -> dict[str, Any]:
    return google_error(status, message)


def _model(request: Request) -> str:
    """The model the path names, without the `models/` prefix a client may have doubled."""
    name = str(request.path_params.get("model") or "").removeprefix("models/")
    if not name:
        raise invalid("The path names no model.", "model")
    return name


async def generate_content(request: Request) -> Response:
    return await _generate(request, stream=False)


async def stream_generate_content(request: Request) -> Response:
    return await _generate(request, stream=True)


async def _generate(request: Request, *, stream: bool) -> Response:
    authorize(request)
    model = _model(request)
    alt = request.query_params.get("alt", "json")
    if alt not in ("json", "sse"):
        raise invalid(f"Unsupported alt={alt!r}: use alt=sse or alt=json.", "alt")
    body = await read_body(request, GenerateContentRequest)
    allow_model(request, model)
    action = "streamGenerateContent" if stream else "generateContent"
    asking = caller(request, f"/v1beta/models/{{model}}:{action}", stream)
    state = request.app.state
    pipeline, sealer = state.pipeline, state.orchestrator.sealer
    translation = translate(body, model, sealer, web_search=pipeline.web is not None)
    turn = await pipeline.prepare(translation.generation, asking, translation.server_tools, count_prompt=True)
    served_tools = {name: origin.kind for name, origin in turn.served.items()}
    renderer = GeminiRenderer(model, seal=lambda text: sealer.seal("reasoning", text),
                              show_thoughts=translation.show_thoughts, server_tools=served_tools,
                              input_tokens=turn.input_tokens)  # fmt: skip
    headers = {CLAMPED_HEADER: str(turn.clamped)} if turn.clamped is not None else {}
    events = pipeline.events(turn, renderer.id)
    if stream and alt == "sse":
        return event_stream(rendered(renderer, events, turn.observer), encode=_sse, headers=headers, start_at_once=True)
    if stream:
        return EventStreamResponse(_json_array(rendered(renderer, events, turn.observer)), start_at_once=True,
                                   media_type="application/json", headers={**SSE_HEADERS, **headers})  # fmt: skip
    await unless_disconnected(request, drain(renderer, events, turn.observer))
    if renderer.error is not None:
        error = renderer.error
        return JSONResponse(google_error(error.status, error_message(error)), status_code=error.status)
    return JSONResponse(renderer.response, headers=headers)


async def count_tokens(request: Request) -> Response:
    """Exact where the engine tokenizes (in-process models, llama.cpp, vLLM, SGLang), else an
    estimate, marked by a header only: Google's answer has no place for it."""
    owner = authorize(request)
    model = _model(request)
    body = await read_body(request, CountTokensRequest)
    allow_model(request, model)
    if body.generate_content_request is not None and body.contents is not None:
        raise invalid("Give `contents` or `generateContentRequest`, not both.", "contents")
    whole = body.generate_content_request
    if whole is None:
        if not body.contents:
            raise invalid("`contents` must hold at least one content.", "contents")
        whole = GenerateContentRequest(contents=body.contents)
    state = request.app.state
    translation = translate(whole, model, state.orchestrator.sealer, web_search=state.pipeline.web is not None)
    count, exact = await state.pipeline.count_tokens(translation.generation, owner)
    return JSONResponse({"totalTokens": count}, headers={} if exact else {ESTIMATED_HEADER: "true"})


async def list_models(
    request: Request, owner: Owner, page_size: int | None = Query(default=None, alias="pageSize", ge=0, le=1000),
    page_token: str | None = Query(default=None, alias="pageToken"),
) -> dict[str, Any]:  # fmt: skip
    """The served models as Gemini `Model`s (`models/<id>`, with token limits where known)."""
    return model_page(request, page_size, page_token)


async def get_model(request: Request, model: str, owner: Owner) -> dict[str, Any]:
    return await one_model(request, model)


async def get_model_v1(request: Request, model: str, owner: Owner) -> dict[str, Any]:
    """`GET /v1/models/{model}`: a Gemini `Model` for Google's clients (`api_version="v1"`),
    Anthropic's `ModelInfo` for Anthropic's, OpenAI's model object for the others."""
    if asks_google(request):
        return await one_model(request, model)
    allow_model(request, model)
    entry = next((entry for entry in served(request) if entry["id"] == model), None)
    if entry is None:
        entry = await request.app.state.router.entry(model)
    return anthropic_model(entry) if asks_anthropic(request) else entry


Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]
_PATH = [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}]
_ALT = [{"name": "alt", "in": "query", "required": False, "schema": {"type": "string", "enum": ["sse", "json"]}}]


def _post(path: str, endpoint: Endpoint, body: type[GenerateContentRequest | CountTokensRequest],
          parameters: list[dict[str, Any]]) -> None:  # fmt: skip
    for prefix in VERSIONS:
        router.add_api_route(f"{prefix}/models/{{model:path}}:{path}", endpoint, methods=["POST"],
                             route_class_override=PlainRoute, include_in_schema=prefix == VERSIONS[0],
                             openapi_extra={**json_body(body), "parameters": parameters})  # fmt: skip


_post("generateContent", generate_content, GenerateContentRequest, _PATH)
_post("streamGenerateContent", stream_generate_content, GenerateContentRequest, _PATH + _ALT)
_post("countTokens", count_tokens, CountTokensRequest, _PATH)
for _prefix in VERSIONS:
    if _prefix not in ("/v1", "/v1/v1"):  # those are the models API's (api/models.py), which answers Google's too
        router.add_api_route(f"{_prefix}/models", list_models, methods=["GET"], include_in_schema=_prefix == VERSIONS[0])
    router.add_api_route(f"{_prefix}/models/{{model:path}}", get_model_v1 if _prefix in ("/v1", "/v1/v1") else get_model,
                         methods=["GET"], include_in_schema=_prefix == VERSIONS[0])  # fmt: skip


def _sse(chunk: dict[str, Any]) -> bytes:
    """A `data:` line; an error ending the stream as bare JSON, as Google's API sends it: the SDKs
    raise on a read that is an error object (`@google/genai`'s `throwIfStreamErrorChunk`), and take
    a `data:` line for one more response."""
    return json_bytes(chunk) + b"\n\n" if "error" in chunk else sse_data(chunk)


async def _json_array(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Google's streamed JSON array: `[` and the first response, `,\\r\\n` before each next one, `]`."""
    separator = b"["
    async for chunk in chunks:
        yield separator + json_bytes(chunk)
        separator = b",\r\n"
    yield b"[]" if separator == b"[" else b"]"
