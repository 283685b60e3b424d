"""Which request a log line is about, and log lines for people and for collectors.

The request being served is a context variable (`current`), set by the HTTP middleware
(`api/request_ids.py`); tasks started inside a request copy it, so a background response's
later lines carry the id of the request that started it. A record factory puts the request's
id, route and model on every log record, whichever logger made it; the formatters write them
as a prefix (`text`) or as fields of one JSON object per line (`json`).
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import Any, Literal

from rich.logging import RichHandler

from ..canonical.jsontext import json_utf8

LogFormat = Literal["text", "json"]

ACCESS_LOGGER = "responsekit.access"
"""One line per answered request (method, path, status, duration), written when the answer has
been sent (`api/request_ids.py`); uvicorn's own access log is turned off by the command."""


class RequestInfo:
    """The request a task works for: its id, its ASGI scope (for the route), its model, and when it
    arrived (`time.perf_counter()`: the access line's duration and the inspector's timeline count from it)."""

    __slots__ = ("arrived", "id", "model", "scope")

    def __init__(self, request_id: str, scope: dict[str, Any], arrived: float) -> None:
        self.id = request_id
        self.scope = scope
        self.arrived = arrived
        self.model: str | None = None

    @property
    def route(self) -> str | None:
        """The path with its parameters' values named back (`/v1/responses/{response_id}`): bounded,
        unlike the path. The matched route's own `path` lacks the prefix of its router (`/v1`)."""
        if "route" not in self.scope:
            return None  # not matched (yet, or at all: a 404)
        params = self.scope.get("path_params") or {}
        if not params:
            return self.scope["path"]
        names = {str(value): f"{{{name}}}" for name, value in params.items()}
        return "/".join(names.get(part, part) for part in self.scope["path"].split("/"))


current: ContextVar[RequestInfo | None] = ContextVar("responsekit_request", default=None)


def request_id() -> str | None:
    """The id of the request being served, if any."""
    info = current.get()
    return info.id if info is not None else None


def request_arrived() -> float | None:
    """When the request being served arrived (`time.perf_counter()`), if any."""
    info = current.get()
    return info.arrived if info is not None else None


def note_model(model: str) -> None:
    """The model a request asked for (the first one resolved: not a summarizer's), for its log lines."""
    info = current.get()
    if info is not None and info.model is None:
        info.model = model


_RECORD_FIELDS = ("request_id", "route", "model")
_ACCESS_FIELDS = ("method", "path", "status", "duration_ms", "client")


def install_record_factory() -> None:
    """Make every log record carry `request_id`, `route` and `model` (None outside a request)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "responsekit", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        info = current.get()
        if info is None:
            record.request_id = record.route = record.model = None
        else:
            record.request_id, record.route, record.model = info.id, info.route, info.model
        return record

    factory.responsekit = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


class TextFormatter(logging.Formatter):
    """The message, after the request's id when it is about one."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        request = getattr(record, "request_id", None)
        if request:  # `format()` sets the message anew for each handler
            record.message = f"{request} {record.message}"
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: level, time, message, logger, and what is known of the request."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _RECORD_FIELDS + _ACCESS_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json_utf8(line).decode()


def configure(level: str, log_format: LogFormat) -> None:
    """The command's logging: Rich lines (`text`) or JSON lines (`json`), the access log included."""
    install_record_factory()
    handler: logging.Handler
    if log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
    else:
        handler = RichHandler(show_path=False)
        handler.setFormatter(TextFormatter("%(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    access = logging.getLogger(ACCESS_LOGGER)
    access.handlers.clear()
    if log_format == "json":
        access.addHandler(handler)
        access.propagate = False
    else:
        plain_access_log()


def plain_access_log() -> None:
    """Access lines, one per request, written by a plain handler of their own.

    When they go to the root logger's Rich handler (`responsekit serve`), each is laid out
    as a table: about a millisecond apiece, which was a third of a streamed response's CPU
    time and a millisecond before its first token. An access logger already given a handler
    (JSON lines, a host's own configuration) is left as it is.
    """
    access = logging.getLogger(ACCESS_LOGGER)
    if access.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(TextFormatter("%(asctime)s %(levelname)-8s %(message)s", "[%x %X]"))
    access.addHandler(handler)
    access.propagate = False
