"""tests/postgres.py: where the configured server does not answer, the PostgreSQL half still
runs on a private cluster, or says in one line how to enable it.

`make test` and CI normally find the server at 127.0.0.1:5432, so this is where the fallback
itself is exercised.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import asyncpg
import pytest

from . import postgres


def test_a_closed_port_does_not_answer(unused_port: int) -> None:
    assert not postgres.answers(f"postgresql://postgres@127.0.0.1:{unused_port}/test")


def test_private_cluster_when_the_server_does_not_answer(unused_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(postgres.URL_VARIABLE, f"postgresql://postgres@127.0.0.1:{unused_port}/test")
    choice = postgres.choose()
    assert choice.url is None
    if choice.pg_ctl is None:  # PostgreSQL is not installed here: the run says how to enable it
        assert not choice.available
        assert "does not answer" in choice.summary and "install PostgreSQL" in choice.summary
        return

    async def roundtrip(url: str) -> int:
        connection = await asyncpg.connect(url)
        try:
            await connection.execute("CREATE TABLE t (n int); INSERT INTO t VALUES (41)")
            return await connection.fetchval("SELECT n + 1 FROM t")
        finally:
            await connection.close()

    directories = Path(tempfile.gettempdir()).glob
    before = set(directories("responsekit-postgres-*"))
    with postgres.private_cluster(choice.pg_ctl) as url:
        assert asyncio.run(roundtrip(url)) == 42
    assert not postgres.answers(url)
    assert set(directories("responsekit-postgres-*")) <= before  # its directory is gone


def test_without_postgresql_one_line_says_how_to_enable_it(unused_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(postgres.URL_VARIABLE, f"postgresql://postgres@127.0.0.1:{unused_port}/test")
    monkeypatch.setattr(postgres, "find_pg_ctl", lambda: None)  # as on a machine without PostgreSQL
    choice = postgres.choose()
    assert not choice.available
    assert "\n" not in choice.summary
    assert "install PostgreSQL" in choice.summary and postgres.URL_VARIABLE in choice.summary
