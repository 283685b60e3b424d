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
    Call it once `authorize` has passed (it leaves the key and owner in the request's state). The
    body's size is read from its `content-length` only if a limit needs it (`Caller.size`)."""
    scope = connection.scope
    state = scope.setdefault("state", {})  # the dict behind `connection.state`, read without a `State`
    metrics = connection.app.state.metrics
    made = Caller(state.get("owner", ""), state.get("api_key"), route,
                  metrics.observation(route, stream) if metrics is not None else None, body_bytes, busy_status,
                  raw_headers=scope["headers"])  # fmt: skip
    state[ANSWER_HEADERS] = made.headers
    return made
