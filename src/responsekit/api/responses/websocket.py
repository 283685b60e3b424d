"""WebSocket mode of `/v1/responses` (`client.responses.connect()`, newer Codex).

Each `response.create` message runs one response, its events sent as JSON messages;
one response is in flight per socket (messages are handled in order). The socket is read
while a response runs, so that a client that leaves stops it at once, as a closed HTTP
stream does, not at the engine's next token. Responses made on
the socket are cached on it, so `previous_response_id` works with `store: false` there;
a continuation that fails evicts the response it continued. Errors use the WebSocket
envelope `{"type": "error", "status", "error": {type, code, message, param}}`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from ...canonical.errors import APIError
from ...canonical.sse import dumps
from ...orchestration.orchestrator import History, Orchestrator
from ..auth import allow_model, authorize
from ..callers import caller
from ..http import validation_error
from .request import CreateResponse, translate

log = logging.getLogger(__name__)
router = APIRouter()

CONNECTION_LIMIT = 3600.0
"""Seconds a socket may live, as OpenAI's (then `websocket_connection_limit_reached`)."""
_NOT_FOR_SOCKETS = ("type", "stream_id", "stream", "stream_options", "background", "generate")


@router.websocket("/responses")
async def responses_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        owner = authorize(websocket)
    except APIError as error:
        await _send_error(websocket, error)
        await websocket.close(code=1008)
        return
    conductor: Orchestrator = websocket.app.state.orchestrator
    cache: History = {}
    opened = time.monotonic()
    inbox: asyncio.Queue[str | None] = asyncio.Queue()
    reader = asyncio.create_task(_read(websocket, inbox))
    run: asyncio.Task[None] | None = None
    try:
        while (message := await inbox.get()) is not None:
            if time.monotonic() - opened > CONNECTION_LIMIT:
                await _send_error(websocket, APIError(
                    400, "This connection reached its 60-minute limit; open a new one.",
                    code="websocket_connection_limit_reached",
                ))  # fmt: skip
                await websocket.close()
                return
            run = asyncio.create_task(_handle(websocket, conductor, owner, cache, message))
            await asyncio.wait({run, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done():  # the client left mid-response: stop it now (its events close)
                run.cancel()
                await asyncio.wait({run})
                return
            run.result()
    except WebSocketDisconnect:
        return
    finally:
        for task in (run, reader):
            if task is not None and not task.done():
                task.cancel()


async def _read(websocket: WebSocket, inbox: asyncio.Queue[str | None]) -> None:
    """The client's messages, in order, then None once it has left."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            inbox.put_nowait(message.get("text") or (message.get("bytes") or b"").decode("utf-8", "replace"))
    finally:
        inbox.put_nowait(None)


async def _handle(websocket: WebSocket, conductor: Orchestrator, owner: str, cache: History, message: str) -> None:
    """One message; what is wrong with it goes back as an error message."""
    try:
        await _create(websocket, conductor, owner, cache, json.loads(message))
    except APIError as error:
        await _send_error(websocket, error)
    except (ValueError, AttributeError, RecursionError):
        await _send_error(websocket, APIError(400, "Messages must be JSON objects.", code="invalid_json"))


async def _create(websocket: WebSocket, conductor: Orchestrator, owner: str, cache: History, event: Any) -> None:
    if event.get("type") != "response.create":
        raise APIError(400, f"Unsupported event type {event.get('type')!r}; send `response.create`.",
                       param="type", code="invalid_value")  # fmt: skip
    stream_id = event.get("stream_id")
    authorize(websocket)  # again: a key revoked or expired since the socket opened is refused now
    try:
        body = CreateResponse.model_validate({k: v for k, v in event.items() if k not in _NOT_FOR_SOCKETS})
    except ValidationError as exc:
        raise validation_error(exc) from None
    allow_model(websocket, body.model)
    asking = caller(websocket, "/v1/responses", True, body_bytes=0)
    try:
        prepared = await conductor.prepare(translate(body, conductor.sealer, conductor.pipeline.web is not None), owner,
                                           cache, asking)  # fmt: skip
    except APIError:
        if body.previous_response_id:
            cache.pop(body.previous_response_id, None)
        raise
    async with aclosing(conductor.events(prepared)) as events:  # closed here if the client leaves
        async for item in events:
            await websocket.send_text(dumps({**item, "stream_id": stream_id} if stream_id else item))
    if prepared.response["status"] == "completed":
        cache[prepared.response["id"]] = prepared.continuation()
    elif body.previous_response_id:
        cache.pop(body.previous_response_id, None)


async def _send_error(websocket: WebSocket, error: APIError) -> None:
    await websocket.send_text(dumps({"type": "error", "status": error.status, **error.body()}))
