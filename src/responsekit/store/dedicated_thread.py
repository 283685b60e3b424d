"""One thread that owns a blocking resource (a SQLite connection): every call runs on it,
in order, and the event loop awaits the result.

The calls go through a queue to a thread of our own, and each result back through the loop's
`call_soon_threadsafe`, rather than through `run_in_executor`: its `concurrent.futures` future,
chained to an asyncio one by `wrap_future`, cost about 100,000 instructions more a call, counted
by callgrind (bench/RESULTS.md, "After: one hop to the database thread"), and every stored response,
usage write and read takes a call.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class DedicatedThread:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` on the thread. A caller cancelled meanwhile does not stop it: it runs
        whole, and its result is dropped."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, function, args))
        return await future

    def stop(self) -> None:
        """After the calls already submitted have run."""
        self._calls.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            loop, future, function, args = call
            try:
                outcome, failed = function(*args), False
            except BaseException as exc:  # handed to the caller, whatever it is  # noqa: BLE001
                outcome, failed = exc, True
            try:
                loop.call_soon_threadsafe(_settle, future, outcome, failed)
            except RuntimeError:  # the loop was closed meanwhile: nobody awaits the result
                pass


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.cancelled():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
