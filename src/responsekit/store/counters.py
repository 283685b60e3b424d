"""Counters of requests and tokens per key and window, in the database every replica shares.

An admission is one transaction: it adds the request (and its reserved tokens) to the rows of
its windows with an upsert that returns the new counts, so each replica's admission sees the
others' (PostgreSQL holds the rows' locks to the commit; SQLite has one writer at a time), and
rolls back when a count passes its limit. Requests in flight are rows with a lease their
process renews, so a replica that dies frees its share within `FLIGHT_LEASE_MS`.

Windows are fixed: the UTC minute, day and month. Within one window no limit is passed by a
single request (counts are exact across replicas); a burst straddling two minutes can have up
to twice `rpm` admitted within sixty seconds (docs/teams.md, How far a burst can overshoot).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .api_keys import Limits
from .database import Database

FLIGHT_LEASE_MS = 60_000
"""A request in flight counts this long after its process last renewed it."""

_UPSERT = (
    "INSERT INTO limit_windows (key_hash, span, start, requests, tokens) VALUES (?, ?, ?, 1, ?) "
    "ON CONFLICT (key_hash, span, start) DO UPDATE SET requests = limit_windows.requests + 1, "
    "tokens = limit_windows.tokens + excluded.tokens RETURNING requests, tokens"
)


@dataclass(frozen=True, slots=True)
class Window:
    span: str
    start: int
    resets_in: float
    """Seconds until the next window starts."""


def windows(now: float) -> dict[str, Window]:
    """The minute, day and month `now` falls in (UTC)."""
    moment = datetime.fromtimestamp(now, UTC)
    following = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
    return {
        "minute": Window("minute", int(now // 60), 60 - now % 60),
        "day": Window("day", int(now // 86400), 86400 - now % 86400),
        "month": Window("month", moment.year * 12 + moment.month - 1, following.timestamp() - now),
    }


@dataclass(slots=True)
class Counted:
    """What an admission found: the counts of its minute (this request included when admitted)
    and, when refused, which limit and for how long."""

    admitted: bool
    minute: Window
    minute_requests: int = 0
    minute_tokens: int = 0
    refused_by: str | None = None
    retry_after: float = 0.0
    flight: str | None = None
    counted: list[tuple[str, int]] = field(default_factory=list)
    """The windows (span, start) the request's tokens were added to, for the correction."""


_BUDGETS = {"day": "daily_tokens", "month": "monthly_tokens"}


class _Refused(Exception):
    def __init__(self, counted: Counted) -> None:
        self.counted = counted


class Counters:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def admit(self, key_hash: str, limits: Limits, tokens: int, now: float) -> Counted:
        """Count one request reserving `tokens` against `limits`, or refuse it (nothing counted)."""
        spans = windows(now)
        minute = spans["minute"]
        try:
            async with self.database.transaction() as db:
                counted = Counted(True, minute)
                if limits.max_concurrent is not None:  # the key's row first: admissions of one key go in turn
                    await db.fetch(_UPSERT, key_hash, "key", 0, 0)
                wanted = [("minute", limits.rpm is not None or limits.tpm is not None, None),
                          ("day", limits.daily_tokens is not None, limits.daily_tokens),
                          ("month", limits.monthly_tokens is not None, limits.monthly_tokens)]  # fmt: skip
                for span, needed, budget in wanted:
                    if not needed:
                        continue
                    window = spans[span]
                    row = (await db.fetch(_UPSERT, key_hash, span, window.start, tokens))[0]
                    requests, used = int(row[0]), int(row[1])
                    counted.counted.append((span, window.start))
                    if span == "minute":
                        counted.minute_requests, counted.minute_tokens = requests, used
                        if limits.rpm is not None and requests > limits.rpm:
                            raise _Refused(_refusal(counted, "rpm", window.resets_in, requests - 1, used - tokens))
                        if limits.tpm is not None and used > limits.tpm:
                            raise _Refused(_refusal(counted, "tpm", window.resets_in, requests - 1, used - tokens))
                    elif budget is not None and used > budget:
                        raise _Refused(_refusal(counted, _BUDGETS[span], window.resets_in, counted.minute_requests - 1,
                                                counted.minute_tokens - tokens))  # fmt: skip
                if limits.max_concurrent is not None:
                    now_ms = int(now * 1000)
                    row = (await db.fetch("SELECT COUNT(*) FROM limit_flights WHERE key_hash = ? AND until_ms > ?",
                                          key_hash, now_ms))[0]  # fmt: skip
                    if int(row[0]) >= limits.max_concurrent:
                        raise _Refused(_refusal(counted, "max_concurrent", 1.0, counted.minute_requests - 1,
                                                counted.minute_tokens - tokens))  # fmt: skip
                    counted.flight = "flt_" + secrets.token_hex(12)
                    await db.execute("INSERT INTO limit_flights (id, key_hash, until_ms) VALUES (?, ?, ?)",
                                     counted.flight, key_hash, now_ms + FLIGHT_LEASE_MS)  # fmt: skip
        except _Refused as refused:
            return refused.counted
        return counted

    async def settle(self, key_hash: str, counted: list[tuple[str, int]], delta: int, flight: str | None) -> None:
        """A request's end: its windows' tokens corrected by `delta` (used minus reserved), its flight ended."""
        async with self.database.transaction() as db:
            for span, start in counted:
                if delta:
                    await db.execute("UPDATE limit_windows SET tokens = tokens + ? WHERE key_hash = ? AND span = ? "
                                     "AND start = ?", delta, key_hash, span, start)  # fmt: skip
            if flight is not None:
                await db.execute("DELETE FROM limit_flights WHERE id = ?", flight)

    async def renew(self, flights: list[str], until_ms: int) -> None:
        for begin in range(0, len(flights), 500):
            chunk = flights[begin : begin + 500]
            marks = ", ".join("?" * len(chunk))
            await self.database.execute(f"UPDATE limit_flights SET until_ms = ? WHERE id IN ({marks})", until_ms, *chunk)

    async def purge(self, now: float) -> None:
        """Drop windows long past and flights whose process stopped renewing them."""
        spans = windows(now)
        async with self.database.transaction() as db:
            for span, keep in (("minute", 2), ("day", 2), ("month", 2)):
                await db.execute("DELETE FROM limit_windows WHERE span = ? AND start < ?", span,
                                 spans[span].start - keep)  # fmt: skip
            await db.execute("DELETE FROM limit_flights WHERE until_ms < ?", int(now * 1000))


def _refusal(counted: Counted, limit: str, retry_after: float, requests: int, tokens: int) -> Counted:
    counted.admitted = False
    counted.refused_by = limit
    counted.retry_after = retry_after
    counted.minute_requests, counted.minute_tokens = max(requests, 0), max(tokens, 0)
    counted.counted = []
    return counted
