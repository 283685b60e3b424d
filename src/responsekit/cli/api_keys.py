"""What `responsekit api-keys` needs besides its commands: the store's key table, opened
on the database the server uses, and expiry times as people write them."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from ..store import Store
from ..store.api_keys import KeyTable

_SPAN = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@asynccontextmanager
async def open_table(url: str) -> AsyncIterator[KeyTable]:
    """The key table of the store at `url` (migrated first, as the server does)."""
    store = await Store.open(url)
    try:
        yield KeyTable(store.database)
    finally:
        await store.close()


def expiry(text: str, now: float | None = None) -> int:
    """Unix seconds from `30d`, `12h`, `90m`, `45s`, `2w` (from now) or an ISO 8601 date or time
    (UTC unless it names its offset); ValueError for anything else or a time already past."""
    now = time.time() if now is None else now
    if match := _SPAN.match(text):
        return int(now) + int(match[1]) * _SECONDS[match[2]]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is neither a span such as 30d nor an ISO date or time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = int(moment.timestamp())
    if seconds <= now:
        raise ValueError(f"{text} is in the past")
    return seconds
