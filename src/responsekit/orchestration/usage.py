"""Recording usage off the streaming path: a generation's end adds its record to a queue in
memory (`UsageLedger.add`, no I/O), and what gathered is written in one transaction every
`FLUSH_SECONDS`: on SQLite by the database's own thread, between its other work
(`Database.write_behind`: no call from the event loop at all), elsewhere by a background task
(`store.usage.insert`, sooner when `BATCH` records wait). A process that dies loses at most the
records of its last second; one whose database fails keeps up to `MAX_PENDING` records and writes
them when it answers again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from ..store.database import Database
from ..store.usage import UsageRecord, insert, statements

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
BATCH = 500
MAX_PENDING = 100_000


class UsageLedger:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._pending: deque[UsageRecord] = deque()
        """Appended by the event loop, taken by the writer (the database's thread, behind): a
        deque's appends and pops are each atomic across threads."""
        self._taken: list[UsageRecord] = []
        """The records of the write behind under way."""
        self._behind = False
        self._writer: asyncio.Task[None] | None = None
        self._early: asyncio.Task[None] | None = None
        """The write of a full batch, started before its second is up (without a write behind)."""

    def add(self, record: UsageRecord) -> None:
        pending = self._pending
        if len(pending) >= MAX_PENDING:
            log.warning("usage records are not being written: dropping the oldest")
            _popped(pending, BATCH)
        pending.append(record)
        if not self._behind and len(pending) >= BATCH and (self._early is None or self._early.done()):
            self._early = asyncio.get_running_loop().create_task(self.flush())

    async def start(self) -> None:
        self._behind = await self.database.write_behind(self, FLUSH_SECONDS)
        if not self._behind:
            self._writer = asyncio.create_task(self._write())

    async def stop(self) -> None:
        if self._behind:
            await self.database.write_behind(None, FLUSH_SECONDS)
            self._behind = False
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self._early is not None:
            await asyncio.wait({self._early})
        await self.flush()

    async def flush(self) -> None:
        """Write every record gathered so far (kept for the next try when the database fails)."""
        while self._pending:
            batch = _popped(self._pending, BATCH)
            try:
                await insert(self.database, batch)
            except Exception:  # kept, written on the next round
                log.warning("could not write %d usage records; will retry", len(batch), exc_info=True)
                self._pending.extendleft(reversed(batch))
                return

    # --- written behind, on the database's thread (`BehindWriter`) ---------------------

    def take(self) -> list[tuple[str, tuple[Any, ...]]]:
        self._taken = _popped(self._pending, len(self._pending))
        return statements(self._taken)

    def written(self, error: BaseException | None) -> None:
        if error is not None:  # kept, written on the next round
            log.warning("could not write %d usage records; will retry", len(self._taken), exc_info=error)
            self._pending.extendleft(reversed(self._taken))
        self._taken = []

    async def _write(self) -> None:
        """Every second, what gathered: a sleep, not a wait for the batch to fill with a timeout,
        which would cost a task and a timeout's exception each idle second."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()


def _popped(pending: deque[UsageRecord], count: int) -> list[UsageRecord]:
    """Up to `count` records from the front (fewer if another thread took some meanwhile)."""
    taken: list[UsageRecord] = []
    with contextlib.suppress(IndexError):
        for _ in range(count):
            taken.append(pending.popleft())
    return taken
