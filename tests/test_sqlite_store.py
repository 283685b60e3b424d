"""The SQLite database under the store: write-only transactions commit in groups, each
whole or not at all; transactions that read keep the connection to their end."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from responsekit.store import sqlite as sqlite_module
from responsekit.store.sqlite import SQLiteDatabase


async def _open(tmp_path: Path) -> SQLiteDatabase:
    database = await SQLiteDatabase.open(tmp_path / "test.db")
    await database.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    return database


async def _write(database: SQLiteDatabase, *rows: tuple[int, str]) -> None:
    async with database.transaction() as db:
        for row in rows:
            await db.execute("INSERT INTO t (id, value) VALUES (?, ?)", *row)


def test_concurrent_write_only_transactions_commit_in_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    groups: list[int] = []
    commit_group = sqlite_module._commit_group

    def counted(connection: sqlite3.Connection, group: list) -> list:  # type: ignore[type-arg]
        groups.append(len(group))
        return commit_group(connection, group)

    monkeypatch.setattr(sqlite_module, "_commit_group", counted)

    async def main() -> list[tuple[int, str]]:
        database = await _open(tmp_path)
        try:
            await asyncio.gather(*(_write(database, (2 * n, "a"), (2 * n + 1, "b")) for n in range(50)))
            return [tuple(row) for row in await database.fetch("SELECT id, value FROM t ORDER BY id")]
        finally:
            await database.close()

    rows = asyncio.run(main())
    assert rows == [(n, "ab"[n % 2]) for n in range(100)]
    assert sum(groups) == 51  # the table's creation, then the 50 transactions
    assert len(groups) < 10, groups  # ...in a few hops, not one each


def test_a_failing_transaction_in_a_group_leaves_the_others_whole(tmp_path: Path) -> None:
    async def main() -> tuple[list[BaseException | None], list[int]]:
        database = await _open(tmp_path)
        try:
            await _write(database, (1, "taken"))
            outcomes = await asyncio.gather(
                _write(database, (10, "x"), (11, "x")),
                _write(database, (20, "x"), (1, "duplicate"), (21, "x")),  # fails on its second row
                _write(database, (30, "x")),
                return_exceptions=True,
            )
            ids = [row[0] for row in await database.fetch("SELECT id FROM t ORDER BY id")]
            return outcomes, ids
        finally:
            await database.close()

    outcomes, ids = asyncio.run(main())
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert ids == [1, 10, 11, 30]  # nothing of the failed transaction, not even its first row


def test_a_failing_transaction_alone_in_its_group_writes_nothing(tmp_path: Path) -> None:
    async def main() -> tuple[BaseException | None, list[int], list[int]]:
        database = await _open(tmp_path)
        try:
            await _write(database, (1, "taken"))
            failed = (await asyncio.gather(_write(database, (20, "x"), (1, "duplicate")), return_exceptions=True))[0]
            ids = [row[0] for row in await database.fetch("SELECT id FROM t ORDER BY id")]
            await _write(database, (30, "x"))  # the connection is left out of any transaction
            return failed, ids, [row[0] for row in await database.fetch("SELECT id FROM t ORDER BY id")]
        finally:
            await database.close()

    failed, ids, after = asyncio.run(main())
    assert isinstance(failed, sqlite3.IntegrityError)
    assert ids == [1]  # nothing of the failed transaction, not even its first row
    assert after == [1, 30]


def test_a_transaction_that_reads_sees_its_own_writes_and_commits_whole(tmp_path: Path) -> None:
    async def main() -> list[int]:
        database = await _open(tmp_path)
        try:
            async with database.transaction() as db:
                await db.execute("INSERT INTO t (id, value) VALUES (?, ?)", 1, "one")
                assert await db.fetchrow("SELECT value FROM t WHERE id = ?", 1) == ("one",)
                await db.execute("INSERT INTO t (id, value) VALUES (?, ?)", 2, "two")
            with pytest.raises(RuntimeError):
                async with database.transaction() as db:
                    await db.execute("INSERT INTO t (id, value) VALUES (?, ?)", 3, "three")
                    assert await db.fetchrow("SELECT count(*) FROM t") == (3,)
                    raise RuntimeError("the caller gives up")
            await _write(database, (4, "four"))  # the connection is free again
            return [row[0] for row in await database.fetch("SELECT id FROM t ORDER BY id")]
        finally:
            await database.close()

    assert asyncio.run(main()) == [1, 2, 4]


def test_a_caller_cancelled_while_its_writes_wait_still_commits_them_whole(tmp_path: Path) -> None:
    async def main() -> list[int]:
        database = await _open(tmp_path)
        try:
            async with database.transaction() as db:  # holds the connection while the others queue
                await db.fetch("SELECT 1")
                waiting = asyncio.ensure_future(_write(database, (5, "a"), (6, "b")))
                await asyncio.sleep(0.05)
                waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await _write(database, (7, "c"))
            return [row[0] for row in await database.fetch("SELECT id FROM t ORDER BY id")]
        finally:
            await database.close()

    assert asyncio.run(main()) == [5, 6, 7]


def test_stored_json_comes_back_exactly(tmp_path: Path) -> None:
    """Written with orjson where it can (big integers and lone surrogates it refuses go through
    the standard library), read back value for value."""
    from responsekit.store import Store

    response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "background": False,
                "output": [{"id": "msg_1", "type": "message", "text": "caf\u00e9 \U0001F680 \ud800"}],
                "tools": [{"type": "function", "name": "f", "parameters": {"maximum": 2**70, "minimum": -(2**63)}}]}  # fmt: skip
    inputs = [{"id": "msg_0", "type": "message", "role": "user", "content": "\u2028 x"}]

    async def main() -> tuple[dict | None, list | None]:  # type: ignore[type-arg]
        store = await Store.open(f"sqlite:///{tmp_path / 'state.db'}")
        try:
            await store.save_response("", response, inputs)
            return await store.get_response("", "resp_1"), await store.input_items("", "resp_1")
        finally:
            await store.close()

    stored, items = asyncio.run(main())
    assert stored == response and items == inputs
