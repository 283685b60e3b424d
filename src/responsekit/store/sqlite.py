"""SQLite, the embedded default: one file, WAL, one connection on one thread.

The connection lives on a thread of its own (SQLite calls block). A transaction's writes
are buffered and sent to that thread in one hop, with its BEGIN and COMMIT: under load each
hop waits for a turn of the busy event loop (and for the GIL), and with a hop per statement
the writer lock was held across several turns (streamed `store:true` responses at
concurrency 64 in bench/gateway.py: about 160 req/s that way, 200-220 this way). A read
inside a transaction sends the writes before it first.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..dedicated_thread import DedicatedThread
from .database import Connection, Row

T = TypeVar("T")
Statement = tuple[str, tuple[Any, ...] | list[tuple[Any, ...]], bool]
"""SQL, its arguments (a list of rows for executemany) and whether it is executemany."""


class SQLiteDatabase:
    dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection, thread: DedicatedThread) -> None:
        self._connection = connection
        self._thread = thread
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> SQLiteDatabase:
        path.parent.mkdir(parents=True, exist_ok=True)
        thread = DedicatedThread("sqlite")

        def connect() -> sqlite3.Connection:
            connection = sqlite3.connect(path, isolation_level=None)
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=10000"):
                connection.execute(f"PRAGMA {pragma}")
            return connection

        return cls(await thread.run(connect), thread)

    async def close(self) -> None:
        async with self._lock:
            await self._thread.run(self._connection.close)
        self._thread.stop()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self._lock:
            batch = _Batch(self._connection, self._thread)
            try:
                yield batch
            except BaseException:
                await self._thread.run(batch.rollback)
                raise
            await self._thread.run(batch.commit)

    async def execute(self, sql: str, *args: Any) -> None:
        async with self._lock:
            await self._thread.run(lambda: self._connection.execute(sql, args).close())

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        async with self.transaction() as connection:
            await connection.executemany(sql, rows)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        async with self._lock:
            return await self._thread.run(lambda: self._connection.execute(sql, args).fetchall())

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None


class _Batch:
    """The connection inside a transaction (the lock is held): writes wait for the next hop.

    Each hop's function runs whole on the database thread, so a cancelled caller cannot
    leave the transaction open or half-applied there.
    """

    def __init__(self, connection: sqlite3.Connection, thread: DedicatedThread) -> None:
        self._connection = connection
        self._thread = thread
        self._pending: list[Statement] = []

    async def execute(self, sql: str, *args: Any) -> None:
        self._pending.append((sql, args, False))

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self._pending.append((sql, rows, True))

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        def read() -> list[Row]:
            return self._connection.execute(sql, args).fetchall()

        return await self._thread.run(self._flush_then, read)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    def commit(self) -> None:
        if self._pending or self._connection.in_transaction:
            self._flush_then(lambda: self._connection.execute("COMMIT").close())

    def rollback(self) -> None:
        self._pending.clear()
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK").close()

    def _flush_then(self, then: Callable[[], T]) -> T:
        """On the database thread: BEGIN if not yet, the buffered writes, then `then`."""
        pending, self._pending = self._pending, []
        connection = self._connection
        try:
            if not connection.in_transaction:
                connection.execute("BEGIN IMMEDIATE").close()
            for sql, args, many in pending:
                (connection.executemany(sql, args) if many else connection.execute(sql, args)).close()
            return then()
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK").close()
            raise
