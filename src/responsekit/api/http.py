"""What every frontend route shares: JSON bodies (size and depth limits), OpenAI's error envelope."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as StarletteJSONResponse
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..canonical.errors import APIError, ContextOverflow, error_body, error_type_for_status
from ..canonical.events import Error
from ..canonical.jsontext import json_utf8
from .streaming import ClientDisconnected

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)


async def read_body(request: Request, model: type[Model]) -> Model:
    """The JSON body validated as `model`; anything wrong is a 4xx in OpenAI's envelope.

    The body size (413) and nesting depth are bounded by the settings, so a hostile body
    costs neither memory nor the interpreter's stack.
    """
    settings = request.app.state.settings
    raw = await _bounded_body(request, settings.max_body_bytes)
    try:
        data = json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError):
        raise APIError(
            400,
            "We could not parse the JSON body of your request. The body must be a JSON object.",
            code="invalid_json",
        ) from None
    if not isinstance(data, dict):
        raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
    if _depth(data) > settings.max_json_depth:
        raise APIError(400, f"The request body nests deeper than {settings.max_json_depth} levels.",
                       code="invalid_json")  # fmt: skip
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _not_json(constant: str) -> Any:
    """NaN and Infinity are not JSON; accepted, they would be echoed into invalid JSON."""
    raise ValueError(f"{constant} is not JSON")


async def _bounded_body(request: Request, limit: int) -> bytes:
    too_large = APIError(413, f"The request body is larger than {limit} bytes.", code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _depth(value: Any) -> int:
    """How deeply a parsed JSON value nests (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node if isinstance(child, (dict, list)))
    return deepest


def validation_error(exc: ValidationError | RequestValidationError) -> APIError:
    first = exc.errors()[0]
    location = [str(part) for part in first.get("loc", ())]
    if isinstance(exc, RequestValidationError) and location[:1] in (["body"], ["query"], ["path"]):
        location = location[1:]  # FastAPI's prefix saying where the parameter was, not its name
    param = ".".join(location) or None
    kind = first.get("type", "")
    if kind == "missing":
        return APIError(400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    code = "invalid_type" if kind.endswith(("_type", "_parsing")) else "invalid_value"
    return APIError(400, f"Invalid value for '{param}': {first.get('msg', 'invalid')}.", param=param, code=code)


class JSONResponse(StarletteJSONResponse):
    """A JSON body by `json_utf8` (Starlette's uses the standard library: a fortieth of a
    non-streamed response's CPU time). The app's default response class."""

    def render(self, content: Any) -> bytes:
        return json_utf8(content)


ErrorBody = Callable[[int, str], dict[str, Any]]
"""A frontend's own error envelope: (HTTP status, message) -> body."""
ErrorWords = Callable[[Error], str]
"""How a frontend words a refusal its clients act on by its text (a context overflow)."""

Client = Callable[[Request], bool]
"""Whether a request comes from a protocol's client (by a header its SDKs send)."""


def asks_anthropic(request: Request) -> bool:
    """An Anthropic client (its SDKs and Claude Code send `anthropic-version` on every request),
    answered in Anthropic's shapes on the paths OpenAI's clients ask too."""
    return "anthropic-version" in request.headers


_error_bodies: list[tuple[tuple[str, ...], ErrorBody, ErrorWords | None, Client | None]] = []


def error_envelope(*prefixes: str, words: ErrorWords | None = None,
                   sent_by: Client | None = None) -> Callable[[ErrorBody], ErrorBody]:  # fmt: skip
    """Errors on paths under `prefixes` (before a stream starts: bad bodies, keys, unknown
    models, 404s) are rendered by the decorated function instead of OpenAI's envelope
    (the Messages API answers in Anthropic's, the Gemini API in Google's). A prefix ending in
    `/` covers the paths below it, not the path without it. `words` words a prompt the pipeline
    counted past the window (`ContextOverflow`) as the frontend words an engine's refusal.
    `sent_by` keeps the envelope to its protocol's clients, on the paths the protocols share
    (`/v1/models`, `/v1/files`); those envelopes are tried first."""

    def register(body: ErrorBody) -> ErrorBody:
        entry = (prefixes, body, words, sent_by)
        _error_bodies.insert(len(_error_bodies) if sent_by is None else 0, entry)
        return body

    return register


def _error_response(request: Request, status: int, body: dict[str, Any], headers: Any = None,
                    refusal: Error | None = None) -> JSONResponse:  # fmt: skip
    for prefixes, render, words, sent_by in _error_bodies:
        if _covers(prefixes, request.url.path) and (sent_by is None or sent_by(request)):
            body = render(status, words(refusal) if refusal is not None and words is not None else body["error"]["message"])
            break
    return JSONResponse(body, status_code=status, headers=headers)


def _covers(prefixes: tuple[str, ...], path: str) -> bool:
    return any(path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/") for prefix in prefixes)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        refusal = exc.event() if isinstance(exc, ContextOverflow) else None
        return _error_response(request, exc.status, exc.body(), refusal=refusal)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(exc)
        return _error_response(request, 400, error.body())

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"Invalid URL ({request.method} {request.url.path})"
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        body = error_body(message, type=error_type_for_status(exc.status_code))
        return _error_response(request, exc.status_code, body, getattr(exc, "headers", None))

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        body = error_body("The server had an error while processing your request.", type="server_error")
        return _error_response(request, 500, body)
