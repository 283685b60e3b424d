"""Who asks for a generation, as the pipeline needs to know it (`orchestration/pipeline.py`).

The caller's key, owner and body size go in; the rate-limit headers the pipeline writes come
out in the request's state (`ANSWER_HEADERS`), which `RequestIds` adds to the answer, whatever
it is: a refusal in the protocol's envelope (the Messages API's is Anthropic's
`rate_limit_error`, by `http.error_envelope`) or the generation.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

from ..orchestration.pipeline import Caller

ANSWER_HEADERS = "answer_headers"
"""The request-state entry whose headers `RequestIds` adds to the answer."""


def caller(connection: HTTPConnection, route: str, stream: bool, *, busy_status: int = 429,
           body_bytes: int | None = None) -> Caller:  # fmt: skip
    """The caller of a generation on `route` (a template, e.g. `/v1/messages`), observed from now.
    Call it once `authorize` has passed."""
    if body_bytes is None:
        length = connection.headers.get("content-length", "")
        body_bytes = int(length) if length.isdigit() else 0
    metrics = connection.app.state.metrics
    made = Caller(getattr(connection.state, "owner", ""), getattr(connection.state, "api_key", None), route,
                  metrics.observation(route, stream) if metrics is not None else None, body_bytes, busy_status)  # fmt: skip
    setattr(connection.state, ANSWER_HEADERS, made.headers)
    return made
