"""PostgreSQL through an asyncpg pool, for several replicas sharing one store.

Notifications (`LISTEN/NOTIFY`) travel on one dedicated connection per process, apart from
the pool: a pooled connection is handed to other work between statements, and a listening
one must stay open. When it drops it is opened again, and the listeners are told that they
may have missed notifications.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

import asyncpg

from .database import Connection, Listener, Row, matchable

log = logging.getLogger(__name__)

RECONNECT_DELAY = 1.0
"""Seconds between attempts to open the listening connection again."""
LISTENER_NAME = "responsekit-listener"
"""The listening connection's `application_name`, as `pg_stat_activity` shows it."""
LIVENESS_INTERVAL = 5.0
"""Seconds between checks that the listening connection still answers (a peer that vanished
without closing the connection, as after a network cut, is noticed by no event)."""


@lru_cache(maxsize=512)
def _numbered(sql: str) -> str:
    """`?` placeholders -> `$1, $2, …`."""
    counter = iter(range(1, 10_000))
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


class PostgresDatabase:
    dialect = "postgres"
    shared_notifications = True

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self._pool = pool
        self._url = url
        self._listeners: dict[str, list[Listener]] = {}
        self._listening: asyncio.Task[None] | None = None
        self._connection: asyncpg.Connection | None = None

    @classmethod
    async def open(cls, url: str) -> PostgresDatabase:
        return cls(await asyncpg.create_pool(url, min_size=1, max_size=20), url)

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        await self._pool.close()

    async def notify(self, channel: str, payload: str) -> None:
        await self._pool.execute("SELECT pg_notify($1, $2)", channel, payload)

    async def changed_elsewhere(self) -> bool:
        return True  # notifications tell of changes; a poll is the safety net under them

    async def listen(self, channel: str, listener: Listener) -> None:
        """Listens from the moment it returns (the first connection is opened here)."""
        self._listeners.setdefault(channel, []).append(listener)
        if self._connection is not None and not self._connection.is_closed():
            await self._connection.add_listener(channel, self._deliver)
        if self._listening is None:
            connected = asyncio.get_running_loop().create_future()
            self._listening = asyncio.create_task(self._keep_listening(connected))
            await connected

    async def _keep_listening(self, connected: asyncio.Future[None]) -> None:
        """Hold the listening connection open, opening it again whenever it drops."""
        while True:
            try:
                connection = await asyncpg.connect(self._url, server_settings={"application_name": LISTENER_NAME})
            except (OSError, asyncpg.PostgresError) as error:
                if not connected.done():
                    connected.set_exception(error)
                    return
                log.warning("cannot listen for notifications (%s); retrying", error)
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            try:
                for channel in self._listeners:
                    await connection.add_listener(channel, self._deliver)
                self._connection = connection
                if connected.done():  # notifications sent while not listening are lost
                    for listener in (f for listeners in self._listeners.values() for f in listeners):
                        listener(None)
                else:
                    connected.set_result(None)
                await self._until_lost(connection)
                log.warning("the connection listening for notifications dropped; reconnecting")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
                log.warning("the connection listening for notifications failed (%s); reconnecting", error)
            finally:
                self._connection = None
                connection.terminate()

    async def _until_lost(self, connection: asyncpg.Connection) -> None:
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _: lost.set())
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), LIVENESS_INTERVAL)
                return
            await asyncio.wait_for(connection.execute("SELECT 1"), LIVENESS_INTERVAL)

    def _deliver(self, _connection: object, _pid: int, channel: str, payload: str) -> None:
        for listener in self._listeners.get(channel, ()):
            listener(payload)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self._pool.acquire() as connection, connection.transaction():
            yield _Connection(connection)

    async def execute(self, sql: str, *args: Any) -> None:
        await self._pool.execute(_numbered(sql), *args)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await self._pool.executemany(_numbered(sql), rows)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        if not matchable(args):
            return []
        return list(await self._pool.fetch(_numbered(sql), *args))

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        if not matchable(args):
            return None
        return await self._pool.fetchrow(_numbered(sql), *args)


class _Connection:
    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, *args: Any) -> None:
        await self._connection.execute(_numbered(sql), *args)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await self._connection.executemany(_numbered(sql), rows)

    async def notify(self, channel: str, payload: str) -> None:
        await self._connection.execute("SELECT pg_notify($1, $2)", channel, payload)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        if not matchable(args):
            return []
        return list(await self._connection.fetch(_numbered(sql), *args))

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        if not matchable(args):
            return None
        return await self._connection.fetchrow(_numbered(sql), *args)
