"""`x-request-id` on every answer, the request's context for log lines, and the access log.

A plain ASGI middleware, outside everything else (`app.py` puts it around Starlette's
error middleware, so a 500 carries the id too): Starlette's `BaseHTTPMiddleware` runs the app
in a task group and copies bodies through memory streams, tens of microseconds a request and
a hop per streamed frame. Here a request costs an id, a context variable and a wrapped `send`
whose only work is on `http.response.start`. With traces on (`tracing.py`), the request's
server span is started and ended here too; with metrics on, every answer is counted here, so
that requests refused before any engine are counted as well.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from ..canonical.ids import new_id
from ..operations import tracing
from ..operations.logs import ACCESS_LOGGER, RequestInfo, current
from ..operations.metrics import Metrics
from .callers import ANSWER_HEADERS

HEADER = b"x-request-id"
SANE_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
"""A client's own id is kept when it is a plain token: it goes into log lines and the store as is."""

access_log = logging.getLogger(ACCESS_LOGGER)


def client_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The client's `x-request-id`, if it sent a sane one."""
    for name, value in headers:
        if name == HEADER:
            return value.decode("ascii") if SANE_ID.fullmatch(value) else None
    return None


class RequestIds:
    def __init__(self, app: Any, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        request_id = client_id(scope["headers"]) or new_id("req")
        header = (HEADER, request_id.encode("ascii"))
        info = RequestInfo(request_id, scope, time.perf_counter())
        token = current.set(info)
        try:
            if kind == "http":
                await self._http(scope, receive, send, header, info)
            else:  # a WebSocket: its handshake answer carries the id (headers of `websocket.accept`)

                async def accept_with_id(message: dict[str, Any]) -> None:
                    if message["type"] == "websocket.accept":
                        message["headers"] = [*message.get("headers", ()), header]
                    await send(message)

                await self.app(scope, receive, accept_with_id)
        finally:
            current.reset(token)

    async def _http(
        self, scope: dict[str, Any], receive: Any, send: Any, header: tuple[bytes, bytes], info: RequestInfo
    ) -> None:
        status: int | None = None

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
                extra = scope.get("state", {}).get(ANSWER_HEADERS)  # rate limits (`callers.py`)
                if extra:
                    message["headers"] += [(name.encode(), value.encode()) for name, value in extra.items()]
            await send(message)

        traced = tracing.active.start_server_span(scope) if tracing.active is not None else None
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if traced is not None:
                tracing.active.end_server_span(*traced, scope, status)  # type: ignore[union-attr]
            if self.metrics is not None:
                self.metrics.answered(scope["method"], info.route, status)
            if access_log.isEnabledFor(logging.INFO):
                _access_line(scope, status, time.perf_counter() - info.arrived)


_KEY_PARAMETER = re.compile(r"(^|&)key=[^&]*")
"""A key in the query (Google's clients may send theirs as `?key=`): never written to the log."""


def _access_line(scope: dict[str, Any], status: int | None, seconds: float) -> None:
    """The access log's line, written once the answer is sent (a stream's at its end)."""
    client = scope.get("client")
    address = f"{client[0]}:{client[1]}" if client else "-"
    path = scope["path"]
    if scope.get("query_string"):
        query = _KEY_PARAMETER.sub(r"\1key=REDACTED", scope["query_string"].decode("latin-1"))
        path = f"{path}?{query}"
    duration_ms = round(seconds * 1000, 3)
    access_log.info(
        '%s - "%s %s HTTP/%s" %s %.1f ms', address, scope["method"], path, scope["http_version"],
        status if status is not None else "-", duration_ms,
        extra={"method": scope["method"], "path": path, "status": status, "duration_ms": duration_ms,
               "client": address},
    )  # fmt: skip
