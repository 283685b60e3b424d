"""WebSocket mode of `/v1/responses` (`client.responses.connect()`, newer Codex).

Each `response.create` message runs one response, its events sent as JSON messages;
one response is in flight per socket (messages are handled in order). Responses made on
the socket are cached on it, so `previous_response_id` works with `store: false` there;
a continuation that fails evicts the response it continued. Errors use the WebSocket
envelope `{"type": "error", "status", "error": {type, code, message, param}}`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from ...errors import APIError
from ...orchestrator import History, Orchestrator
from ...sse import dumps
from ..auth import authorize
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
    try:
        while True:
            message = await websocket.receive_text()
            if time.monotonic() - opened > CONNECTION_LIMIT:
                await _send_error(websocket, APIError(
                    400, "This connection reached its 60-minute limit; open a new one.",
                    code="websocket_connection_limit_reached",
                ))  # fmt: skip
                await websocket.close()
                return
            try:
                await _create(websocket, conductor, owner, cache, json.loads(message))
            except APIError as error:
                await _send_error(websocket, error)
            except (ValueError, AttributeError, RecursionError):
                await _send_error(websocket, APIError(400, "Messages must be JSON objects.", code="invalid_json"))
    except WebSocketDisconnect:
        return


async def _create(websocket: WebSocket, conductor: Orchestrator, owner: str, cache: History, event: Any) -> None:
    if event.get("type") != "response.create":
        raise APIError(400, f"Unsupported event type {event.get('type')!r}; send `response.create`.",
                       param="type", code="invalid_value")  # fmt: skip
    stream_id = event.get("stream_id")
    try:
        body = CreateResponse.model_validate({k: v for k, v in event.items() if k not in _NOT_FOR_SOCKETS})
    except ValidationError as exc:
        raise validation_error(exc) from None
    metrics = websocket.app.state.metrics
    observed = metrics.observation("/v1/responses", True) if metrics is not None else None
    try:
        prepared = await conductor.prepare(translate(body, conductor.sealer), owner, cache)
    except APIError:
        if body.previous_response_id:
            cache.pop(body.previous_response_id, None)
        raise
    async for item in conductor.events(prepared, observed):
        await websocket.send_text(dumps({**item, "stream_id": stream_id} if stream_id else item))
    if prepared.response["status"] == "completed":
        cache[prepared.response["id"]] = prepared.continuation()
    elif body.previous_response_id:
        cache.pop(body.previous_response_id, None)


async def _send_error(websocket: WebSocket, error: APIError) -> None:
    await websocket.send_text(dumps({"type": "error", "status": error.status, **error.body()}))
