"""Server-sent events as the gateway writes them: one frame per event, ASCII-only JSON.

Below `api/` because background runs (`runs.py`) keep their events as ready frames.
"""

from __future__ import annotations

import json
from typing import Any

from .jsontext import json_utf8

SSE_DONE = b"data: [DONE]\n\n"


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


def dumps(value: Any) -> str:
    return json_bytes(value).decode("ascii")
