"""Background responses: they run without their client, every event persisted.

A run lives in the process that started it; clients (of this process or of another
replica sharing the database) follow it through its events. A maintenance loop flushes
events in small batches, renews each run's lease, carries out cancellations asked for on
other replicas, and fails runs whose process died (their lease ran out).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Protocol

from .events import Error
from .rendering import Renderer
from .sse import dumps, sse_frame
from .store import Store

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.05
POLL_INTERVAL = 0.1
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponseRendering(Renderer, Protocol):
    """What the orchestrator and the runs ask of the Responses renderer (`api/responses/render.py`)."""

    response: dict[str, Any]
    """The Response object the events fold into."""

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
        self.finishing = False
        self.interrupted = False
        """Cancelled because the server is shutting down, not by a client."""
        self.task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        self._changed = asyncio.Event()

    def publish(self, event: dict[str, Any]) -> None:
        text = dumps(event)
        self.frames.append(sse_frame(event["type"], text))
        self.pending.append((event["sequence_number"], text))
        self._changed.set()

    def close(self) -> None:
        self.done = True
        self._changed.set()

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        position = after + 1
        while True:
            while position < len(self.frames):
                yield self.frames[position]
                position += 1
            if self.done:
                return
            self._changed.clear()
            if position >= len(self.frames):
                await self._changed.wait()


class Runs:
    def __init__(self, store: Store, lease_seconds: float, resumed: Resumed) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.resumed = resumed
        self._runs: dict[str, Run] = {}
        self._maintenance: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._expire_dead_runs()
        self._maintenance = asyncio.create_task(self._maintain())

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
        if self._maintenance:
            self._maintenance.cancel()

    def lease_until(self) -> int:
        return int(time.time() + self.lease_seconds)

    def launch(
        self,
        response_id: str,
        execute: Callable[[Run], Coroutine[Any, Any, None]],
    ) -> Run:
        run = self._runs[response_id] = Run(response_id)

        async def main() -> None:
            try:
                await execute(run)
            finally:
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

    async def flush(self, run: Run) -> None:
        async with run.lock:
            if run.pending and not run.finishing:
                events, run.pending = run.pending, []
                await self.store.append_events(run.response_id, events)

    async def follow(self, response_id: str, after: int) -> AsyncIterator[bytes]:
        """Frames after `after` until the terminal one: from this process's run, or from the store."""
        run = self._runs.get(response_id)
        if run is not None:
            async for frame in run.follow(after):
                yield frame
            return
        finished = False
        while True:
            rows = await self.store.events_after(response_id, after)
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
                    await asyncio.sleep(POLL_INTERVAL)

    async def _maintain(self) -> None:
        last_lease = last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(FLUSH_INTERVAL)
            try:
                for run in list(self._runs.values()):
                    await self.flush(run)
                now = time.monotonic()
                if now - last_lease > self.lease_seconds / 3:
                    last_lease = now
                    ids = list(self._runs)
                    await self.store.renew_leases(ids, self.lease_until())
                    for response_id in await self.store.cancel_requested(ids):
                        run = self._runs.get(response_id)
                        if run and run.task and not run.finishing:
                            run.task.cancel()
                if now - last_expiry > self.lease_seconds:
                    last_expiry = now
                    await self._expire_dead_runs()
            except Exception:
                log.exception("background maintenance failed; retrying")

    async def _expire_dead_runs(self) -> None:
        for response in await self.store.expired_runs(int(time.time())):
            if response["id"] in self._runs:
                continue
            log.warning("background response %s lost its runner; marking it failed", response["id"])
            stored = [json.loads(text) for _, text in await self.store.events_after(response["id"], -1)]
            renderer = self.resumed(response, stored)
            message = "The server running this response stopped before it finished."
            events = renderer.feed(Error("server_error", message, 500))
            await self.store.finish_response(renderer.response, [(e["sequence_number"], dumps(e)) for e in events])
