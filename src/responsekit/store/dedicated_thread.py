"""One thread that owns a blocking resource (a SQLite connection): every call runs on it,
in order, and the event loop awaits the result.

The calls go through a queue to a thread of our own, and each result back through the loop's
`call_soon_threadsafe`, rather than through `run_in_executor`: its `concurrent.futures` future,
chained to an asyncio one by `wrap_future`, cost about 100,000 instructions more a call, counted
by callgrind (bench/RESULTS.md, "One hop to the database thread"), and every stored response,
usage write and read takes a call.

The thread can also run a job of its own every so often (`every`), between the calls: writes
that need no answer (the usage records) then take no call at all.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Job = Callable[[], bool]
"""Run on the thread when due; False: it could not run now (the resource was busy), try again soon."""
RETRY_SECONDS = 0.05
Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]] | tuple[()]


class DedicatedThread:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._job: Job | None = None
        self._every = 0.0
        self._due = 0.0
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` on the thread. A caller cancelled meanwhile does not stop it: it runs
        whole, and its result is dropped."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, function, args))
        return await future

    async def every(self, seconds: float, job: Job | None) -> None:
        """Run `job` on the thread every `seconds`, between calls (None: no job from now on; when
        this returns, a job that was running has ended)."""
        await self.run(self._set_job, seconds, job)

    def _set_job(self, seconds: float, job: Job | None) -> None:
        self._job, self._every, self._due = job, seconds, time.monotonic() + seconds

    def stop(self) -> None:
        """After the calls already submitted have run."""
        self._calls.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while True:
            try:
                call = self._calls.get(timeout=None if self._job is None else max(0.0, self._due - time.monotonic()))
            except queue.Empty:
                call = ()
            if call is None:
                return
            if call:
                loop, future, function, args = call
                try:
                    outcome, failed = function(*args), False
                except BaseException as exc:  # handed to the caller, whatever it is  # noqa: BLE001
                    outcome, failed = exc, True
                try:
                    loop.call_soon_threadsafe(_settle, future, outcome, failed)
                except RuntimeError:  # the loop was closed meanwhile: nobody awaits the result
                    pass
            if self._job is not None and time.monotonic() >= self._due:
                self._run_job(self._job)

    def _run_job(self, job: Job) -> None:
        try:
            ran = job()
        except Exception:  # a job's failure is its own to handle; the thread goes on
            log.exception("a background job on the %s thread failed", self._thread.name)
            ran = True
        self._due = time.monotonic() + (self._every if ran else RETRY_SECONDS)


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.cancelled():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
