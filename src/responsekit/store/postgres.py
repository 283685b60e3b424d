"""PostgreSQL through an asyncpg pool, for several replicas sharing one store."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

import asyncpg

from .database import Connection, Row, matchable


@lru_cache(maxsize=512)
def _numbered(sql: str) -> str:
    """`?` placeholders -> `$1, $2, …`."""
    counter = iter(range(1, 10_000))
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


class PostgresDatabase:
    dialect = "postgres"

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, url: str) -> PostgresDatabase:
        return cls(await asyncpg.create_pool(url, min_size=1, max_size=20))

    async def close(self) -> None:
        await self._pool.close()

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

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        if not matchable(args):
            return []
        return list(await self._connection.fetch(_numbered(sql), *args))

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        if not matchable(args):
            return None
        return await self._connection.fetchrow(_numbered(sql), *args)
