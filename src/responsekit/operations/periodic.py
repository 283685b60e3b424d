"""Background upkeep on a fixed beat: lease renewals, sweeps of dead runs, expired files and
containers. One loop for all of them, so that each keeps its beat and survives its own failures
the same way."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


async def every(
    interval: float, action: Callable[[], Coroutine[Any, Any, None]], doing: str, *, at_once: bool = False
) -> None:
    """Call `action` every `interval` seconds until cancelled (first at once with `at_once`), on a
    fixed beat: a late timer or a slow round does not push the next ones back (the lease arithmetic
    of background runs counts on the interval), and a round that outlasts the interval is followed
    at once by the next. A round that fails is logged, and the next one comes on its beat."""
    loop = asyncio.get_running_loop()
    beat = loop.time() - (interval if at_once else 0.0)
    while True:
        beat = max(beat + interval, loop.time())
        await asyncio.sleep(beat - loop.time())
        try:
            await action()
        except Exception:
            log.exception("background maintenance (%s) failed; retrying", doing)
