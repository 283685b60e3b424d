"""Limits per key, whatever the protocol: admission before a generation, correction after it.

A key's limits are its own, over the server's `default_limits` for each it does not set. A
key with no limit at all costs nothing here (no database). Otherwise a request is admitted by
one transaction on the shared counters (`store/counters.py`), reserving an estimate of its
tokens: its input (from the size of its body) and its output (`max_output_tokens` as the
client set it, else `DEFAULT_OUTPUT_RESERVATION`). When the generation ends, the tokens the
engine reported replace the estimate, in the background (`Meter.end`), and its place among
the key's concurrent requests is freed.

The answer's rate-limit headers say what the minute window held at admission, in OpenAI's
names (`x-ratelimit-*`, which its SDKs read) and Anthropic's (`anthropic-ratelimit-*`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..backends.fairness import Place
from ..canonical.events import Event, Usage
from ..operations.metrics import CLIENT_LEFT, OUTPUT, Observation
from ..store.api_keys import ApiKey, Limits
from ..store.counters import FLIGHT_LEASE_MS, Counted, Counters
from ..store.usage import UsageRecord
from .usage import UsageLedger

log = logging.getLogger(__name__)

NO_LIMITS = Limits()
DEFAULT_OUTPUT_RESERVATION = 1024
"""Output tokens reserved for a request that sets no maximum (corrected once it ends)."""
BYTES_PER_TOKEN = 4
"""The input estimate: a body's bytes over this (about right for English and JSON)."""
RENEW_SECONDS = FLIGHT_LEASE_MS / 3000
"""How often this process renews the leases of its requests in flight (a third of a lease)."""

MESSAGES = {
    "rpm": "requests per minute",
    "tpm": "tokens per minute",
    "max_concurrent": "concurrent requests",
    "daily_tokens": "tokens per day",
    "monthly_tokens": "tokens per month",
}


@dataclass(slots=True)
class Admission:
    key_hash: str
    limits: Limits
    reserved: int
    counted: Counted

    def headers(self) -> dict[str, str]:
        return rate_headers(self.limits, self.counted, self.reserved)


class Refused(Exception):
    """A request over one of its key's limits (answered 429 with `headers`)."""

    def __init__(self, admission: Admission) -> None:
        counted = admission.counted
        super().__init__(f"Rate limit reached: {MESSAGES.get(counted.refused_by or '', counted.refused_by)} "
                         f"of this API key ({getattr(admission.limits, counted.refused_by or '')}). "
                         f"Try again in {math.ceil(counted.retry_after)} s.")  # fmt: skip
        self.limit = counted.refused_by or ""
        self.retry_after = counted.retry_after
        self.headers = {**admission.headers(), "retry-after": str(max(1, math.ceil(counted.retry_after))),
                        "retry-after-ms": str(max(1, int(counted.retry_after * 1000)))}  # fmt: skip


class Limiter:
    """This process's side of the limits: admissions, corrections, and its flights' leases."""

    def __init__(self, counters: Counters, default: Limits) -> None:
        self.counters = counters
        self.default = default
        self._default_or_none = default if default != NO_LIMITS else None
        self._flights: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._renewer: asyncio.Task[None] | None = None

    def limits_for(self, key: ApiKey | None) -> Limits | None:
        """The limits a request with this key (None: a configured key, or none) is held to; None: no limit."""
        if key is None:
            return self._default_or_none
        limits = key.limits.over(self.default)
        return limits if limits != NO_LIMITS else None

    async def admit(self, key_hash: str, limits: Limits, body_bytes: int, max_output: int | None) -> Admission:
        """Count the request against its key's limits; `Refused` when it is over one."""
        reserved = body_bytes // BYTES_PER_TOKEN + (max_output or DEFAULT_OUTPUT_RESERVATION)
        counted = await self.counters.admit(key_hash, limits, reserved, time.time())
        admission = Admission(key_hash, limits, reserved, counted)
        if not counted.admitted:
            raise Refused(admission)
        if counted.flight is not None:
            self._flights.add(counted.flight)
        return admission

    def settle(self, admission: Admission, used: int) -> None:
        """The request ended having used `used` tokens: correct its windows and free its flight, off
        the request's path."""
        counted = admission.counted
        if counted.flight is not None:
            self._flights.discard(counted.flight)
        if counted.counted or counted.flight is not None:
            self._spawn(self._settle(admission, used))

    async def _settle(self, admission: Admission, used: int) -> None:
        try:
            await self.counters.settle(admission.key_hash, admission.counted.counted, used - admission.reserved,
                                       admission.counted.flight)  # fmt: skip
        except Exception:  # the flight's lease ends it anyway; a lost correction leaves the estimate
            log.warning("could not correct the token count of a request", exc_info=True)

    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew())

    async def stop(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)

    async def _renew(self) -> None:
        purged = 0.0
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            try:
                now = time.time()
                if self._flights:
                    await self.counters.renew(list(self._flights), int(now * 1000) + FLIGHT_LEASE_MS)
                if now - purged > 300:
                    await self.counters.purge(now)
                    purged = now
            except Exception:  # tried again next round
                log.warning("could not renew the leases of requests in flight", exc_info=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def rate_headers(limits: Limits, counted: Counted, reserved: int) -> dict[str, str]:
    """OpenAI's and Anthropic's rate-limit headers for the minute window (requests and tokens).

    Anthropic limits input and output tokens apart and sends `anthropic-ratelimit-input-tokens-*`
    and `-output-tokens-*` beside the most restrictive `-tokens-*`
    (https://docs.anthropic.com/en/api/rate-limits#response-headers); `tpm` is one budget both
    draw on, so all three say the same."""
    headers: dict[str, str] = {}
    reset = counted.minute.resets_in
    at = datetime.fromtimestamp(time.time() + reset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for kind, limit, used in (("requests", limits.rpm, counted.minute_requests),
                              ("tokens", limits.tpm, counted.minute_tokens)):  # fmt: skip
        if limit is None:
            continue
        remaining = str(max(0, limit - used))
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        headers[f"x-ratelimit-remaining-{kind}"] = remaining
        headers[f"x-ratelimit-reset-{kind}"] = _duration(reset)
        for name in (kind,) if kind == "requests" else (kind, "input-tokens", "output-tokens"):
            headers[f"anthropic-ratelimit-{name}-limit"] = str(limit)
            headers[f"anthropic-ratelimit-{name}-remaining"] = remaining
            headers[f"anthropic-ratelimit-{name}-reset"] = at
    return headers


def _duration(seconds: float) -> str:
    """OpenAI's way of writing a reset: `1s`, `6m0s`, `250ms`."""
    if seconds < 1:
        return f"{max(1, int(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


class Meter:
    """A generation's observer (`rendering.rendered`): when it ends, it settles the request's
    admission (if its key has limits) and leaves its usage record with the ledger; every call is
    passed on to the metrics' own observation, if any."""

    __slots__ = ("admission", "first_token", "inner", "ledger", "limiter", "place", "record", "started")

    def __init__(self, inner: Observation | None, limiter: Limiter, admission: Admission | None,
                 ledger: UsageLedger | None, record: UsageRecord) -> None:  # fmt: skip
        self.inner = inner
        self.limiter = limiter
        self.admission = admission
        self.ledger = ledger
        self.record = record
        """Filled in as the generation goes: its tokens, status and duration at the end."""
        self.started = time.perf_counter()
        self.place: Place | None = None
        """Its place at a busy engine (`backends/fairness.py`), given back at the end."""
        self.first_token: float | None = None
        """An attribute, not a property: `rendering.rendered` reads it for every event until it is set."""

    def serving(self, model: str, upstream: str) -> None:
        self.record.model, self.record.upstream = model, upstream
        if self.inner is not None:
            self.inner.serving(model, upstream)

    def begin(self) -> None:
        if self.inner is not None:
            self.inner.begin()

    def saw(self, event: Event) -> None:
        if isinstance(event, Usage):  # several generations when server tools ran
            record = self.record
            record.input_tokens += event.input_tokens
            record.output_tokens += event.output_tokens
            record.cached_tokens += event.cached_tokens
            record.reasoning_tokens += event.reasoning_tokens
        elif self.first_token is None and isinstance(event, OUTPUT):
            self.first_token = time.perf_counter()
        if self.inner is not None:
            self.inner.saw(event)

    def __del__(self) -> None:
        """A generation that never began (its client left between admission and the first step of
        its stream) still gives its place and reservation back: nothing else would."""
        if self.record is not None:
            self.inner = None  # its observation never began either
            if self.place is not None:
                self.place.release()
                self.place = None
            with contextlib.suppress(Exception):  # (no event loop left at interpreter exit)
                self.end(CLIENT_LEFT)

    def end(self, status: str) -> None:
        record, self.record = self.record, None  # type: ignore[assignment]
        if record is None:
            return
        if self.place is not None:
            self.place.release()
        if self.admission is not None:
            self.limiter.settle(self.admission, record.input_tokens + record.output_tokens)
        if self.ledger is not None:
            record.status = status
            record.duration_ms = int((time.perf_counter() - self.started) * 1000)
            self.ledger.add(record)
        if self.inner is not None:
            self.inner.end(status)
