"""One thread that owns a blocking resource (a SQLite connection): every call runs on it,
in order, and the event loop awaits the result."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


class DedicatedThread:
    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(function, *args))

    def stop(self) -> None:
        """After the calls already submitted have run."""
        self._executor.shutdown(wait=True)
