"""Limits per key at the frontends: admit a generation request or answer 429 in its protocol's
envelope (the Messages API's is Anthropic's `rate_limit_error`, by `http.error_envelope`).

The counting is protocol-neutral (`orchestration/limits.py`); here the request's key, body
size and output maximum go in, and the rate-limit headers come out: they are left in the
request's state (`answer_headers`), which `RequestIds` adds to the answer, whatever it is.
A failure of the counters' database admits the request uncounted: a limit never makes a 5xx.
"""

from __future__ import annotations

import logging
import time

from starlette.requests import HTTPConnection

from ..backends import Backend
from ..backends.fairness import Busy
from ..canonical.errors import APIError
from ..operations.logs import current
from ..operations.metrics import Observation
from ..orchestration.limits import Limiter, Meter, Refused
from ..store.api_keys import ApiKey, Limits
from ..store.usage import UsageRecord

log = logging.getLogger(__name__)

ANSWER_HEADERS = "answer_headers"
"""The request-state entry whose headers `RequestIds` adds to the answer."""


async def metered(
    connection: HTTPConnection, observed: Observation | None, route: str, model: str, backend: Backend,
    max_output: int | None, body_bytes: int | None = None,
) -> Observation | Meter | None:
    """The generation's observer: counted against its key's limits (429 when it is over one), given
    its place at the engine when that is busy (`max_concurrency`: 429, or 529 `overloaded_error`
    on the Messages API, when none frees in time), and recorded in the usage report when it ends
    (`Meter.end`).

    Call it once the request is known good (its model resolved), just before generating.
    """
    state = connection.app.state
    limiter: Limiter = state.limiter
    key: ApiKey | None = getattr(connection.state, "api_key", None)
    owner: str = getattr(connection.state, "owner", "")
    ledger = state.usage if state.settings.record_usage else None
    limits = limiter.limits_for(key)
    gate = state.router.gate(backend)
    if ledger is None and limits is None and gate is None:
        return observed  # nothing to count, record or queue for
    info = current.get()
    record = UsageRecord(
        created_ms=int(time.time() * 1000), key_hash=owner, api_key_id=key.id if key is not None else _configured(owner),
        request_id=info.id if info is not None else None, route=route, model=model, upstream=backend.name,
        input_tokens=0, cached_tokens=0, output_tokens=0, reasoning_tokens=0, status="", duration_ms=0,
    )  # fmt: skip
    meter = Meter(observed, limiter, None, ledger, record)
    if info is not None:
        meter.started = info.arrived
    if limits is not None:
        await _admit(connection, meter, limits, owner, max_output, body_bytes)
    if gate is not None:
        settings = state.settings
        try:
            meter.place = await gate.acquire(owner, key.weight if key is not None else 1.0, settings.queue_timeout,
                                             settings.max_queue_per_key)  # fmt: skip
        except Busy as busy:
            status = 529 if route == "/v1/messages" else 429
            meter.inner = None  # the metrics' observation never began: the answer is counted as any other
            meter.end(str(status))
            headers = dict(getattr(connection.state, ANSWER_HEADERS, None) or {})
            headers["retry-after"] = str(max(1, round(busy.retry_after)))
            setattr(connection.state, ANSWER_HEADERS, headers)
            raise APIError(status, str(busy), type="server_error" if status == 529 else "requests",
                           code="engine_overloaded") from None  # fmt: skip
    return meter


async def _admit(connection: HTTPConnection, meter: Meter, limits: Limits, owner: str, max_output: int | None,
                 body_bytes: int | None) -> None:  # fmt: skip
    state = connection.app.state
    limiter: Limiter = state.limiter
    if body_bytes is None:
        length = connection.headers.get("content-length", "")
        body_bytes = int(length) if length.isdigit() else 0
    try:
        meter.admission = await limiter.admit(owner, limits, body_bytes, max_output)
    except Refused as refused:
        setattr(connection.state, ANSWER_HEADERS, refused.headers)
        meter.inner = None  # the metrics' observation never began: the answer is counted as any other
        meter.end("429")
        raise APIError(429, str(refused), type="requests" if refused.limit in ("rpm", "max_concurrent") else "tokens",
                       code="rate_limit_exceeded") from None  # fmt: skip
    except Exception:  # the database of the counters failed: admit, uncounted
        log.warning("could not count a request against its key's limits; admitted uncounted", exc_info=True)
        return
    setattr(connection.state, ANSWER_HEADERS, meter.admission.headers())


def _configured(owner: str) -> str | None:
    """The usage report's `api_key_id` for a configured key (no id of its own): its hash's start."""
    return f"sha256:{owner[:16]}" if owner else None
