"""A minimal async database connection, implemented for SQLite and PostgreSQL.

The store writes its SQL once, with `?` placeholders; each implementation adapts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

Row = Sequence[Any]


class Connection(Protocol):
    async def execute(self, sql: str, *args: Any) -> None: ...

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...


class Database(Connection, Protocol):
    dialect: str

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A connection whose statements commit together, or not at all."""
        ...

    async def close(self) -> None: ...
