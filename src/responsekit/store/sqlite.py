"""SQLite, the embedded default: one file, WAL, one connection serialised by a lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from .database import Connection, Row


class SQLiteDatabase:
    dialect = "sqlite"

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> SQLiteDatabase:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = await aiosqlite.connect(path, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=10000"):
            await connection.execute(f"PRAGMA {pragma}")
        return cls(connection)

    async def close(self) -> None:
        await self._connection.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self._lock:
            await self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield _Unlocked(self._connection)
            except BaseException:
                await self._connection.execute("ROLLBACK")
                raise
            await self._connection.execute("COMMIT")

    async def execute(self, sql: str, *args: Any) -> None:
        async with self._lock:
            await self._connection.execute(sql, args)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        async with self.transaction() as connection:
            await connection.executemany(sql, rows)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        async with self._lock:
            return await _Unlocked(self._connection).fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None


class _Unlocked:
    """The connection inside a transaction (the lock is already held)."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, *args: Any) -> None:
        await self._connection.execute(sql, args)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        await self._connection.executemany(sql, rows)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        async with self._connection.execute(sql, args) as cursor:
            return list(await cursor.fetchall())

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None
