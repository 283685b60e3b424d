"""Limits per key at the frontends: admit a generation request or answer 429 in its protocol's
envelope (the Messages API's is Anthropic's `rate_limit_error`, by `http.error_envelope`).

The counting is protocol-neutral (`orchestration/limits.py`); here the request's key, body
size and output maximum go in, and the rate-limit headers come out: they are left in the
request's state (`answer_headers`), which `RequestIds` adds to the answer, whatever it is.
A failure of the counters' database admits the request uncounted: a limit never makes a 5xx.
"""

from __future__ import annotations

import logging

from starlette.requests import HTTPConnection

from ..canonical.errors import APIError
from ..operations.metrics import Observation
from ..orchestration.limits import Limiter, Meter, Refused

log = logging.getLogger(__name__)

ANSWER_HEADERS = "answer_headers"
"""The request-state entry whose headers `RequestIds` adds to the answer."""


async def limited(connection: HTTPConnection, observed: Observation | None, max_output: int | None,
                  body_bytes: int | None = None) -> Observation | Meter | None:  # fmt: skip
    """The generation's observer, counted against its key's limits; 429 when it is over one.

    Call it once the request is known good (after its model is resolved), just before generating:
    the observer's end settles what was reserved.
    """
    limiter: Limiter = connection.app.state.limiter
    limits = limiter.limits_for(getattr(connection.state, "api_key", None))
    if limits is None:
        return observed
    if body_bytes is None:
        length = connection.headers.get("content-length", "")
        body_bytes = int(length) if length.isdigit() else 0
    try:
        admission = await limiter.admit(connection.state.owner, limits, body_bytes, max_output)
    except Refused as refused:
        setattr(connection.state, ANSWER_HEADERS, refused.headers)
        raise APIError(429, str(refused), type="requests" if refused.limit in ("rpm", "max_concurrent") else "tokens",
                       code="rate_limit_exceeded") from None  # fmt: skip
    except Exception:  # the database of the counters failed: admit, uncounted
        log.warning("could not count a request against its key's limits; admitted uncounted", exc_info=True)
        return observed
    setattr(connection.state, ANSWER_HEADERS, admission.headers())
    return Meter(observed, limiter, admission)
