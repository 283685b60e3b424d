"""Recording usage off the streaming path: a generation's end adds its record to a list in
memory (`UsageLedger.add`, no I/O), and a background task writes what gathered, in one
transaction (`store.usage.insert`), every `FLUSH_SECONDS` (sooner when `BATCH` records wait).
A process that dies loses at most the records of its last second; one whose database fails
keeps up to `MAX_PENDING` records and writes them when it answers again."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..store.database import Database
from ..store.usage import UsageRecord, insert

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
BATCH = 500
MAX_PENDING = 100_000


class UsageLedger:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._pending: list[UsageRecord] = []
        self._writer: asyncio.Task[None] | None = None
        self._early: asyncio.Task[None] | None = None
        """The write of a full batch, started before its second is up."""

    def add(self, record: UsageRecord) -> None:
        if len(self._pending) >= MAX_PENDING:
            log.warning("usage records are not being written: dropping the oldest")
            del self._pending[: BATCH]
        self._pending.append(record)
        if len(self._pending) >= BATCH and (self._early is None or self._early.done()):
            self._early = asyncio.get_running_loop().create_task(self.flush())

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write())

    async def stop(self) -> None:
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
            batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
            try:
                await insert(self.database, batch)
            except Exception:  # kept, written on the next round
                log.warning("could not write %d usage records; will retry", len(batch), exc_info=True)
                self._pending[:0] = batch
                return

    async def _write(self) -> None:
        """Every second, what gathered: a sleep, not a wait for the batch to fill with a timeout,
        which would cost a task and a timeout's exception each idle second."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()
