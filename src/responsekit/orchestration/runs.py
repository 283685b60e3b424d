"""Background responses: they run without their client, every event persisted.

A run lives in the process that started it; clients (of this process or of another
replica sharing the database) follow it through its events. Each run writes its new events
as soon as it has some, at most once per FLUSH_INTERVAL (events arriving meanwhile go in
the next batch). A maintenance loop renews each run's lease, carries out cancellations asked
for on other replicas; another fails runs whose process died (their lease ran out), within
`lease_seconds` of its death: see `RENEW_EVERY`.

A follower on another replica reads the stored events, woken by the store's notification
that they grew (PostgreSQL `LISTEN/NOTIFY`), with a slow poll in case one is missed.
No follower sees a run's terminal event before the response is stored with its end: a
client that saw it complete finds it complete on every replica, whatever dies next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Protocol

from ..canonical.events import Error
from ..canonical.sse import dumps, sse_frame
from ..operations.periodic import every
from ..store import Store
from .rendering import Renderer

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.05
"""The shortest time between two writes of a run's events: a slow stream's events are written
one by one as they come, a fast one's in batches, at most 20 transactions a second a run."""
POLL_INTERVAL = 0.1
"""How often a follower reads a run of another process from a store that does not notify across processes."""
SAFETY_POLL_INTERVAL = 2.0
"""How often it reads the store anyway when the store notifies (a notification may be lost)."""
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

# What a lease of `lease_seconds` promises: a run whose process dies is marked failed
# within a lease of the death, and a live process keeps its runs through stalls of half a lease.
# A process that dies just after renewing leaves its lease LEASE_AHEAD to run; the first sweep
# after that, at most SWEEP_EVERY later, fails the run: 5/6 of a lease after the death, the last
# sixth left for that sweep's own reads and writes and a late timer. A live process renews every
# RENEW_EVERY, so a renewal may come half a lease late (a slow database, a busy loop, a pause)
# before the lease it renews runs out. Leases are stored in milliseconds, by the wall clock:
# replicas on several machines must keep their clocks in step (NTP), their skew adds to both.
RENEW_EVERY = 1 / 6
"""How often (a fraction of the lease) a process renews its runs' leases and looks for cancellations."""
LEASE_AHEAD = 2 / 3
"""How far (a fraction of the lease) past a renewal the renewed lease runs."""
SWEEP_EVERY = 1 / 6
"""How often (a fraction of the lease) each process looks for runs whose lease ran out."""


class ResponseRendering(Renderer, Protocol):
    """What the orchestrator and the runs ask of the Responses renderer (`api/responses/render.py`)."""

    response: dict[str, Any]
    """The Response object the events fold into."""
    reads: dict[str, str]
    """Item id -> what the model read of that server-run call, where its item does not keep it
    (`store.MODEL_READ`)."""

    def add_ready_item(self, item: dict[str, Any]) -> None: ...

    def cancel(self) -> list[dict[str, Any]]: ...


Resumed = Callable[[dict[str, Any], list[dict[str, Any]]], ResponseRendering]
"""A renderer taking up a stored response after its stored events (to end a run whose process died)."""


class Run:
    """One background response generating in this process."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self.frames: list[bytes] = []
        """Every SSE frame so far; frame n has sequence_number n."""
        self.pending: list[tuple[int, str]] = []
        """Events not written to the store yet."""
        self.done = False
        self.stored = False
        """The response is stored with its end (set before `close`)."""
        self.terminal: int | None = None
        """The index of the terminal frame, held back from followers until `stored`."""
        self.finishing = False
        self.interrupted = False
        """Cancelled because the server is shutting down, not by a client."""
        self.task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        self.unflushed = asyncio.Event()
        self._changed = asyncio.Event()

    def publish(self, event: dict[str, Any]) -> None:
        text = dumps(event)
        if event["type"] in TERMINAL:
            self.terminal = len(self.frames)
        self.frames.append(sse_frame(event["type"], text))
        self.pending.append((event["sequence_number"], text))
        self.unflushed.set()
        self._changed.set()

    def close(self) -> None:
        self.done = True
        self._changed.set()

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        """Frames after `after`; the terminal one only if the run ended stored (else the
        follower takes the end from the store, where whoever ends the run writes it)."""
        position = after + 1
        while True:
            self._changed.clear()
            while position < self._visible():
                yield self.frames[position]
                position += 1
            if self.done:
                return
            await self._changed.wait()

    def _visible(self) -> int:
        return len(self.frames) if self.stored or self.terminal is None else self.terminal


class Runs:
    def __init__(self, store: Store, lease_seconds: float, resumed: Resumed) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.resumed = resumed
        self._runs: dict[str, Run] = {}
        self._maintenance: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self._expire_dead_runs()
        await self.store.on_cancel(self._cancel_asked)
        # Two loops, so that failing many dead runs never delays the renewal of live ones.
        self._maintenance = [
            asyncio.create_task(every(self.lease_seconds * RENEW_EVERY, self._renew, "renewing leases")),
            asyncio.create_task(every(self.lease_seconds * SWEEP_EVERY, self._expire_dead_runs, "failing dead runs")),
        ]

    def _cancel_asked(self, response_id: str | None) -> None:
        """A client asked another replica to cancel a run; if it runs here, it stops now."""
        run = self._runs.get(response_id) if response_id else None
        if run and run.task and not run.finishing:
            run.task.cancel()

    async def stop(self, timeout: float) -> None:
        """Give running responses `timeout` seconds to finish; the rest end as failed."""
        tasks = [run.task for run in self._runs.values() if run.task]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout)
            for run in list(self._runs.values()):
                if run.task in late and not run.finishing:
                    run.interrupted = True
                    run.task.cancel()
            if late:
                await asyncio.wait(late)
        for task in self._maintenance:
            task.cancel()

    def lease_until_ms(self) -> int:
        """When a lease taken or renewed now runs out, in milliseconds since the epoch."""
        return int((time.time() + self.lease_seconds * LEASE_AHEAD) * 1000)

    def launch(
        self,
        response_id: str,
        execute: Callable[[Run], Coroutine[Any, Any, None]],
    ) -> Run:
        run = self._runs[response_id] = Run(response_id)

        async def main() -> None:
            flushing = asyncio.create_task(self._flush_while_running(run))
            try:
                await execute(run)
            finally:
                flushing.cancel()  # the run is finishing: its end wrote the last events
                run.close()
                self._runs.pop(response_id, None)

        run.task = asyncio.create_task(main())
        return run

    def states(self) -> dict[str, int]:
        """This process's runs by state, for the metrics: generating, or writing their end."""
        finishing = sum(1 for run in self._runs.values() if run.finishing)
        return {"running": len(self._runs) - finishing, "finishing": finishing}

    def local(self, response_id: str) -> Run | None:
        return self._runs.get(response_id)

    async def cancel(self, owner: str, response_id: str) -> None:
        run = self._runs.get(response_id)
        if run is not None:
            if run.task and not run.finishing:
                run.task.cancel()
            if run.task:
                await asyncio.wait([run.task])
        else:
            await self.store.request_cancel(owner, response_id)

    async def _flush_while_running(self, run: Run) -> None:
        while True:
            await run.unflushed.wait()
            run.unflushed.clear()
            try:
                await self._flush(run)
            except Exception:
                log.exception("writing the events of background response %s failed; retrying", run.response_id)
                run.unflushed.set()
            await asyncio.sleep(FLUSH_INTERVAL)

    async def _flush(self, run: Run) -> None:
        async with run.lock:
            if run.pending and not run.finishing:
                events, run.pending = run.pending, []
                try:
                    await self.store.append_events(run.response_id, events)
                except BaseException:
                    run.pending[:0] = events  # not written: they go with the next batch, or the run's end
                    raise

    async def follow(self, response_id: str, after: int) -> AsyncIterator[bytes]:
        """Frames after `after` until the terminal one: from this process's run, or from the store."""
        run = self._runs.get(response_id)
        ahead = False
        if run is not None:
            async for frame in run.follow(after):
                yield frame
                after += 1
            if run.stored:
                return
            # Its end was not stored here (the write failed, or another replica ended it when
            # this process stalled past its lease): the stored end may be numbered from the
            # last events stored, before some this follower got from memory.
            ahead = True
        poll = SAFETY_POLL_INTERVAL if self.store.notified_across_processes else POLL_INTERVAL
        finished = False
        with self.store.watch(response_id) as changed:
            while True:
                changed.clear()
                rows = await self.store.events_after(response_id, after)
                if not rows and ahead:
                    stored = await self.store.events_after(response_id, -1)
                    rows = [row for row in stored[-1:] if json.loads(row[1])["type"] in TERMINAL]
                for sequence, text in rows:
                    kind = json.loads(text)["type"]
                    yield sse_frame(kind, text)
                    after = sequence
                    if kind in TERMINAL:
                        return
                if not rows:
                    if finished:
                        return  # its terminal event came before `after`: nothing will follow (never a hang)
                    # A run's end stores its last events with its status: once it is seen finished,
                    # one more read finds every event there is.
                    finished = not await self.store.running(response_id)
                    if not finished:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(changed.wait(), poll)

    async def _renew(self) -> None:
        """Renew this process's leases, and stop its runs that were cancelled (in case the
        notification was lost) or ended elsewhere (this process stalled past their lease)."""
        ids = list(self._runs)
        await self.store.renew_leases(ids, self.lease_until_ms())
        for response_id in await self.store.runs_to_stop(ids):
            run = self._runs.get(response_id)
            if run and run.task and not run.finishing:
                run.task.cancel()

    async def _expire_dead_runs(self) -> None:
        for response in await self.store.expired_runs(int(time.time() * 1000)):
            if response["id"] in self._runs:
                continue
            log.warning("background response %s lost its runner; marking it failed", response["id"])
            stored = [json.loads(text) for _, text in await self.store.events_after(response["id"], -1)]
            renderer = self.resumed(response, stored)
            message = "The server running this response stopped before it finished."
            events = renderer.feed(Error("server_error", message, 500))
            await self.store.finish_response(renderer.response, [(e["sequence_number"], dumps(e)) for e in events])

