"""What every frontend route shares: JSON bodies, OpenAI errors, SSE framing, disconnects."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import aclosing, suppress
from typing import Any, Protocol, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as StarletteJSONResponse
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import APIError, error_body, error_type_for_status
from ..events import Error, Event
from ..jsontext import json_utf8

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
SSE_DONE = b"data: [DONE]\n\n"


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


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` documenting the body a route reads itself (`read_body`) as `model`.

    Routes read their bodies by hand (size and depth limits, OpenAI's errors), so FastAPI
    does not see them; this puts the model's schema, its definitions inlined, in the
    OpenAPI document for clients and schema-driven tests.
    """
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref", "")
            if reference.startswith("#/$defs/"):
                rest = {key: value for key, value in node.items() if key != "$ref"}
                return inline({**definitions[reference.removeprefix("#/$defs/")], **rest})
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}


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
    code = "invalid_type" if kind.endswith("_type") or kind.endswith("_parsing") else "invalid_value"
    return APIError(400, f"Invalid value for '{param}': {first.get('msg', 'invalid')}.", param=param, code=code)


Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class PlainRoute(APIRoute):
    """A route FastAPI documents but does not drive: its endpoint takes the request alone.

    FastAPI's per-request machinery (solving the endpoint's parameters and dependencies,
    serializing its return value) cost about 60 µs a request, a tenth of a streamed
    response's CPU time. The routes every generation takes (`POST /responses`,
    `POST /chat/completions`) read their bodies themselves anyway (`read_body`), so they
    skip it, and authorize the request themselves. Their bodies' schemas are still in
    the OpenAPI document (`json_body`).
    """

    def get_route_handler(self) -> Endpoint:
        return self.endpoint  # type: ignore[return-value]


def plain_post(router: APIRouter, path: str, body: type[BaseModel]) -> Callable[[Endpoint], Endpoint]:
    """Register the decorated endpoint as `POST path` on a `PlainRoute`, its body documented as `body`."""

    def register(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(path, endpoint, methods=["POST"], openapi_extra=json_body(body),
                             route_class_override=PlainRoute)  # fmt: skip
        return endpoint

    return register


class Renderer(Protocol):
    """Turns canonical events into a frontend's events; `finished` once it sent its last."""

    finished: bool
    error: Error | None

    def start(self) -> list[dict[str, Any]]: ...

    def feed(self, event: Event) -> list[dict[str, Any]]: ...


async def rendered(renderer: Renderer, events: AsyncIterator[Event]) -> AsyncIterator[dict[str, Any]]:
    """Every frontend event of one generation, ending with the renderer's last one.

    Streaming sends these; a non-streaming request folds them: one code path for both.
    Leaving early closes the engine's stream, and so its HTTP request.
    """
    for event in renderer.start():
        yield event
    async with aclosing(events):
        async for canonical in events:
            for event in renderer.feed(canonical):
                yield event
            if renderer.finished:
                return
    for event in renderer.feed(Error("server_error", "the engine's stream ended without finishing", 502)):
        yield event


async def drain(renderer: Renderer, events: AsyncIterator[Event]) -> None:
    """Run a generation to its end for a non-streaming answer (the renderer keeps the result)."""
    async for _ in rendered(renderer, events):
        pass


def raise_for_error(renderer: Renderer) -> None:
    """A non-streaming answer that failed becomes an HTTP error in OpenAI's envelope."""
    error = renderer.error
    if error is not None:
        raise APIError(error.status, error.message, type=error_type_for_status(error.status), code=error.code)


def sse_event(event: dict[str, Any]) -> bytes:
    """One Responses event in one SSE frame: `event:` line equal to the JSON `type`."""
    return b"event: %s\ndata: %s\n\n" % (event["type"].encode(), json_bytes(event))


def sse_frame(kind: str, data: str) -> bytes:
    return f"event: {kind}\ndata: {data}\n\n".encode()


def sse_data(payload: dict[str, Any]) -> bytes:
    """One Chat Completions chunk (no `event:` line, as OpenAI sends them)."""
    return b"data: %s\n\n" % json_bytes(payload)


def json_bytes(value: Any) -> bytes:
    """Compact ASCII-only JSON: U+2028/U+2029 and lone surrogates would break line-splitting
    clients. UTF-8 output that is not plain ASCII is written again with the standard
    library's escaping."""
    data = json_utf8(value)
    return data if data.isascii() else json.dumps(value, separators=(",", ":")).encode()


class JSONResponse(StarletteJSONResponse):
    """A JSON body by `json_utf8` (Starlette's uses the standard library: a fortieth of a
    non-streamed response's CPU time). The app's default response class."""

    def render(self, content: Any) -> bytes:
        return json_utf8(content)


def dumps(value: Any) -> str:
    return json_bytes(value).decode("ascii")


def event_stream(frames: AsyncIterator[bytes], *, heartbeat: bytes | None = None,
                 headers: dict[str, str] | None = None) -> StreamingResponse:
    return EventStreamResponse(frames, heartbeat=heartbeat, media_type="text/event-stream",
                               headers={**SSE_HEADERS, **(headers or {})})


COALESCE_LIMIT = 1 << 16
"""Bytes of frames a stream may produce ahead of a client that reads slowly."""
HEARTBEAT_SECONDS = 10.0
"""How long a stream with a heartbeat stays silent before one is sent."""


class EventStreamResponse(StreamingResponse):
    """An SSE body whose frames leave in as few writes as they can without waiting.

    A producer task runs the generation until it waits for the engine (or `limit` bytes
    wait unsent), so the frames made from one read of the engine's stream leave in one
    system call rather than one each, and the last batch carries the end of the body.
    No frame is ever held back: a batch goes out as soon as the producer has nothing more
    at hand. When the client leaves, the producer is cancelled, and with it the engine's
    request. (Each write to a client that is waiting wakes it: on a virtual machine the
    wake-up costs more than the write.)

    Starlette's own streaming response runs the body and a disconnect listener in an anyio
    task group, whose cancel scopes cost about a fifth of a streamed response's CPU time;
    here the listener is a plain task that cancels the producer.

    A `heartbeat` frame (Anthropic's `ping`) is sent whenever the stream has been silent for
    `HEARTBEAT_SECONDS` after it started, between frames; one timer a period, nothing per frame.
    """

    def __init__(self, frames: AsyncIterator[bytes], *, heartbeat: bytes | None = None, **options: Any) -> None:
        super().__init__(frames, **options)
        self._frames = frames
        self._heartbeat = heartbeat

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        loop = asyncio.get_running_loop()
        batch: list[bytes] = []
        size = 0
        finished = failed = False
        ready: asyncio.Future[None] | None = None
        """Set while the writer waits for frames (bare futures: an `asyncio.Event` costs a
        future and a loop lookup on every wait, and these wait for every token)."""
        room: asyncio.Future[None] | None = None
        """Set while the producer waits for the writer to take a full batch."""

        async def produce() -> None:
            nonlocal size, finished, failed, room
            try:
                async for frame in self._frames:
                    batch.append(frame)
                    size += len(frame)
                    _wake(ready)
                    if size >= COALESCE_LIMIT:
                        room = loop.create_future()
                        await room
            except BaseException:
                failed = True
                raise
            finally:
                finished = True
                _wake(ready)

        producer = asyncio.create_task(produce())
        listener = asyncio.create_task(_disconnected(receive))
        listener.add_done_callback(lambda _: producer.cancel())
        started = False
        sent = False
        """Whether a body went out since the last heartbeat tick."""
        timer: asyncio.TimerHandle | None = None

        def tick() -> None:
            nonlocal sent, timer, size
            if finished:
                return
            if started and not sent and not batch and self._heartbeat is not None:
                batch.append(self._heartbeat)
                size += len(self._heartbeat)
                _wake(ready)
            sent = False
            timer = loop.call_later(HEARTBEAT_SECONDS, tick)

        if self._heartbeat is not None:
            timer = loop.call_later(HEARTBEAT_SECONDS, tick)
        try:
            while True:
                if not batch and not finished:
                    ready = loop.create_future()
                    await ready
                    ready = None
                done = finished  # then every frame is in the batch taken now
                body = batch[0] if len(batch) == 1 else b"".join(batch)
                batch.clear()
                size = 0
                _wake(room)
                last = done and not failed
                if body or last:
                    if not started:
                        # Started once the producer waits for the engine: the start (and its
                        # access-log line) costs the client no time the engine was not taking.
                        await send({"type": "http.response.start", "status": self.status_code,
                                    "headers": self.raw_headers})  # fmt: skip
                        started = True
                    await send({"type": "http.response.body", "body": body, "more_body": not last})
                    sent = True
                if done:
                    break
            await asyncio.wait({producer})
            if not (producer.cancelled() and listener.done()):  # unless the client left
                producer.result()  # its exception, if it failed
        finally:
            if timer is not None:
                timer.cancel()
            listener.cancel()
            if not producer.done():
                producer.cancel()
                await asyncio.wait({producer})


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class ClientDisconnected(Exception):
    """The client went away while a non-streaming answer was being generated."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it (and so the upstream request) if the client disconnects."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task not in done:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnected
    return task.result()


async def _disconnected(receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


ErrorBody = Callable[[int, str], dict[str, Any]]
"""A frontend's own error envelope: (HTTP status, message) -> body."""

_error_bodies: list[tuple[tuple[str, ...], ErrorBody]] = []


def error_envelope(*prefixes: str) -> Callable[[ErrorBody], ErrorBody]:
    """Errors on paths under `prefixes` (before a stream starts: bad bodies, keys, unknown
    models, 404s) are rendered by the decorated function instead of OpenAI's envelope
    (issue 15: the Messages API answers in Anthropic's)."""

    def register(body: ErrorBody) -> ErrorBody:
        _error_bodies.append((prefixes, body))
        return body

    return register


def _error_response(request: Request, status: int, body: dict[str, Any], headers: Any = None) -> JSONResponse:
    path = request.url.path
    for prefixes, render in _error_bodies:
        if any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes):
            body = render(status, body["error"]["message"])
            break
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return _error_response(request, exc.status, exc.body())

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
