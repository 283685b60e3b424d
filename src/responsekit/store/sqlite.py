"""SQLite, the embedded default: one file, WAL, one connection on one thread.

The connection lives on a thread of its own (SQLite calls block), and every hop to it
costs a wake-up of that thread and of the event loop, and turns of the GIL between them.
So a transaction's writes are buffered and sent in one hop, with its BEGIN and COMMIT,
and the transactions that only write (storing a finished response, the common case)
commit in groups: those that end while a group is being written go to the thread
together, in one SQLite transaction, each inside a savepoint of its own so that one
failing leaves the others whole. A transaction that reads takes the connection at its
first read (writes buffered before it go first) and keeps it to its end.

Notifications reach the listeners of this process only, after their transaction commits;
other processes on the same file are not told (they poll).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from .database import Connection, Listener, Row, matchable
from .dedicated_thread import DedicatedThread

T = TypeVar("T")
Statement = tuple[str, tuple[Any, ...] | list[tuple[Any, ...]], bool]
"""SQL, its arguments (a list of rows for executemany) and whether it is executemany."""


class SQLiteDatabase:
    dialect = "sqlite"
    shared_notifications = False

    def __init__(self, connection: sqlite3.Connection, thread: DedicatedThread, path: Path | None = None) -> None:
        self._connection = connection
        self._thread = thread
        self._lock = asyncio.Lock()
        self._queued: list[tuple[list[Statement], asyncio.Future[None]]] = []
        """Write-only transactions waiting for the next group commit."""
        self._committer: asyncio.Task[None] | None = None
        self._listeners: dict[str, list[Listener]] = {}
        self._files = (path, path.with_name(f"{path.name}-wal")) if path is not None else ()
        self._files_seen: list[tuple[int, int, int] | None] | None = None
        self._data_version: int | None = None

    @classmethod
    async def open(cls, path: Path) -> SQLiteDatabase:
        path.parent.mkdir(parents=True, exist_ok=True)
        thread = DedicatedThread("sqlite")

        def connect() -> sqlite3.Connection:
            connection = sqlite3.connect(path, isolation_level=None)
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=10000"):
                connection.execute(f"PRAGMA {pragma}")
            return connection

        return cls(await thread.run(connect), thread, path)

    async def close(self) -> None:
        if self._committer is not None:
            await asyncio.wait({self._committer})
        async with self._lock:
            await self._thread.run(self._connection.close)
        self._thread.stop()

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    async def notify(self, channel: str, payload: str) -> None:
        self._deliver(channel, payload)

    async def changed_elsewhere(self) -> bool:
        """Whether another connection to the file (another process) committed since the last
        call. SQLite's `data_version` tells (https://www.sqlite.org/pragma.html#pragma_data_version),
        but asking is a hop to the database thread; a commit changes the file or its write-ahead
        log, so it is asked only when one of them changed since the last call (a `stat` each)."""
        seen = [_stat(file) for file in self._files]
        if seen == self._files_seen:
            return False
        self._files_seen = seen
        async with self._lock:
            version = await self._thread.run(lambda: self._connection.execute("PRAGMA data_version").fetchone()[0])
        changed, self._data_version = version != self._data_version, version
        return changed

    async def listen(self, channel: str, listener: Listener) -> None:
        self._listeners.setdefault(channel, []).append(listener)

    def _deliver(self, channel: str, payload: str) -> None:
        for listener in self._listeners.get(channel, ()):
            listener(payload)

    async def _group_commit(self, statements: list[Statement]) -> None:
        """Commit these writes with the other write-only transactions ending about now; alone
        (nothing queued, nobody at the connection: a quiet server's usual case), at once, without
        a committer task and its turns of the event loop. Those ending meanwhile queue behind."""
        if not self._queued and not self._lock.locked() and (self._committer is None or self._committer.done()):
            async with self._lock:  # (a caller cancelled in the hop leaves its writes to commit whole there)
                outcome = (await self._thread.run(_commit_group, self._connection, [statements]))[0]
            if outcome is not None:
                raise outcome
            return
        done = asyncio.get_running_loop().create_future()
        self._queued.append((statements, done))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_queued())
        await done  # (a caller cancelled here leaves its writes queued: they commit whole)

    async def _commit_queued(self) -> None:
        while self._queued:
            async with self._lock:
                group, self._queued = self._queued, []
                try:
                    outcomes = await self._thread.run(_commit_group, self._connection, [s for s, _ in group])
                except BaseException as exc:  # the group's COMMIT failed: none of it was written  # noqa: BLE001
                    outcomes = [exc] * len(group)
            for (_, done), outcome in zip(group, outcomes, strict=True):
                if done.done():
                    continue
                if outcome is None:
                    done.set_result(None)
                else:
                    done.set_exception(outcome)

    async def execute(self, sql: str, *args: Any) -> None:
        async with self.transaction() as connection:
            await connection.execute(sql, *args)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        async with self.transaction() as connection:
            await connection.executemany(sql, rows)

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        if not matchable(args):
            return []
        async with self._lock:
            return await self._thread.run(lambda: self._connection.execute(sql, args).fetchall())

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None


def _stat(file: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(file)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _commit_group(connection: sqlite3.Connection, group: list[list[Statement]]) -> list[BaseException | None]:
    """On the database thread: the transactions of `group` in one SQLite transaction, each in
    a savepoint (but one alone in its group, a quiet server's usual case, which needs none);
    what each came to (None: written)."""
    outcomes: list[BaseException | None] = []
    connection.execute("BEGIN IMMEDIATE").close()
    try:
        if len(group) == 1:
            try:
                _run(connection, group[0])
            except Exception as exc:  # noqa: BLE001
                connection.execute("ROLLBACK").close()
                return [exc]
            outcomes.append(None)
        else:
            for statements in group:
                connection.execute("SAVEPOINT one").close()
                try:
                    _run(connection, statements)
                except Exception as exc:  # noqa: BLE001
                    connection.execute("ROLLBACK TO one").close()
                    outcomes.append(exc)
                else:
                    outcomes.append(None)
                connection.execute("RELEASE one").close()
        connection.execute("COMMIT").close()
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK").close()
        raise
    return outcomes


def _run(connection: sqlite3.Connection, statements: list[Statement]) -> None:
    for sql, args, many in statements:
        (connection.executemany(sql, args) if many else connection.execute(sql, args)).close()  # type: ignore[arg-type]


class _Transaction:
    """`SQLiteDatabase.transaction`: its writes buffered in a `_Batch`, committed at the end with
    the group, or by the connection a read took. A class rather than an `asynccontextmanager`,
    whose generator every stored response and usage write would pay for."""

    __slots__ = ("_batch", "_database")

    def __init__(self, database: SQLiteDatabase) -> None:
        self._database = database
        self._batch = _Batch(database._connection, database._thread, database._lock)

    async def __aenter__(self) -> Connection:
        return self._batch

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:  # fmt: skip
        batch, database = self._batch, self._database
        try:
            if kind is not None:
                if batch.locked:
                    await database._thread.run(batch.rollback)
                return  # the error goes on
            if batch.locked:
                await database._thread.run(batch.commit)
        finally:
            if batch.locked:
                database._lock.release()
        if not batch.locked and batch.pending:
            await database._group_commit(batch.pending)
        for channel, payload in batch.notifications:
            database._deliver(channel, payload)


class _Batch:
    """The connection inside a transaction: writes wait in `pending`, for the commit or for
    the transaction's first read, which takes the connection (the lock) to the end.

    Each hop's function runs whole on the database thread, so a cancelled caller cannot
    leave the transaction open or half-applied there.
    """

    def __init__(self, connection: sqlite3.Connection, thread: DedicatedThread, lock: asyncio.Lock) -> None:
        self._connection = connection
        self._thread = thread
        self._lock = lock
        self.pending: list[Statement] = []
        self.locked = False
        self.notifications: list[tuple[str, str]] = []
        """Delivered once the transaction has committed."""

    async def execute(self, sql: str, *args: Any) -> None:
        self.pending.append((sql, args, False))

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        self.pending.append((sql, rows, True))

    async def notify(self, channel: str, payload: str) -> None:
        self.notifications.append((channel, payload))

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        if not matchable(args):
            return []

        def read() -> list[Row]:
            return self._connection.execute(sql, args).fetchall()

        if not self.locked:
            await self._lock.acquire()
            self.locked = True
        return await self._thread.run(self._flush_then, read)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    def commit(self) -> None:
        if self.pending or self._connection.in_transaction:
            self._flush_then(lambda: self._connection.execute("COMMIT").close())

    def rollback(self) -> None:
        self.pending.clear()
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK").close()

    def _flush_then(self, then: Callable[[], T]) -> T:
        """On the database thread: BEGIN if not yet, the buffered writes, then `then`."""
        pending, self.pending = self.pending, []
        connection = self._connection
        try:
            if not connection.in_transaction:
                connection.execute("BEGIN IMMEDIATE").close()
            _run(connection, pending)
            return then()
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK").close()
            raise
