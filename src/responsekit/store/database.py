"""A minimal async database connection, implemented for SQLite and PostgreSQL.

The store writes its SQL once, with `?` placeholders; each implementation adapts it.

A client can send text no database holds: JSON carries lone surrogates (`"\\ud800"`), which
neither database can encode, and NULs, which PostgreSQL's text type refuses. No stored
value equals such text, so a read given it finds no row rather than failing: an id
that cannot exist is simply not found, on every route that looks one up. What a client
names for storage (item ids, names) is checked where it enters, with `storable`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from ..canonical.ids import storable

Row = Sequence[Any]


def matchable(args: Sequence[Any]) -> bool:
    """Whether a read with these parameters can find anything: False when one of them is text
    no database holds, which therefore equals no stored value."""
    return all(storable(arg) for arg in args if isinstance(arg, str))


class Connection(Protocol):
    async def execute(self, sql: str, *args: Any) -> None: ...

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None: ...

    async def fetch(self, sql: str, *args: Any) -> list[Row]: ...

    async def fetchrow(self, sql: str, *args: Any) -> Row | None: ...

    async def notify(self, channel: str, payload: str) -> None:
        """Tell the listeners of `channel` (`Database.listen`), once this transaction commits."""
        ...


Listener = Callable[[str | None], None]
"""Called with each notification's payload, and with None after a gap in listening (a
reconnection) during which notifications may have been missed."""


class Database(Connection, Protocol):
    dialect: str

    shared_notifications: bool
    """Whether `listen` hears the notifications of other processes too (PostgreSQL), or only
    of this one (SQLite: other processes on the file are not told)."""

    async def changed_elsewhere(self) -> bool:
        """Whether another process may have changed the database since the last call: for a
        poll to skip reading again what nobody changed (PostgreSQL: always True, its polls being
        a safety net under notifications)."""
        ...

    async def listen(self, channel: str, listener: Listener) -> None:
        """Call `listener` for every notification on `channel`, from now until `close`."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A connection whose statements commit together, or not at all."""
        ...

    async def close(self) -> None: ...
