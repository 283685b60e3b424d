from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import openai
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import ScriptedUpstream, serve


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started by a test (in-process or as a command) keep their state in its tmp_path."""
    monkeypatch.setenv("RESPONSEKIT_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    engine = ScriptedUpstream()
    with serve(engine.app) as url:
        engine.url = f"{url}/v1"  # type: ignore[attr-defined]
        yield engine


@dataclass
class Server:
    url: str
    upstream: ScriptedUpstream

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def client(self, **options: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key="test", max_retries=0, **options)  # type: ignore[arg-type]


POSTGRES_URL = os.environ.get("RESPONSEKIT_TEST_DATABASE_URL")
DATABASES = ["sqlite", "postgres"] if POSTGRES_URL else ["sqlite"]
"""State tests run on both stores; PostgreSQL when RESPONSEKIT_TEST_DATABASE_URL is set (`make test` sets it)."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not POSTGRES_URL:
        terminalreporter.write_line("PostgreSQL was not tested: set RESPONSEKIT_TEST_DATABASE_URL (make test does).")


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: SQLite by default, or the parameter `postgres`."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    assert POSTGRES_URL
    name = f"rk_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_postgres(f'CREATE DATABASE "{name}"'))
    yield POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
    asyncio.run(_postgres(f'DROP DATABASE "{name}" WITH (FORCE)'))


async def _postgres(sql: str) -> None:
    connection = await asyncpg.connect(POSTGRES_URL)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@pytest.fixture
def settings(upstream: ScriptedUpstream, database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)],  # type: ignore[attr-defined]
        probe=False,
        data_dir=tmp_path,
        database_url=database_url,
    )


@pytest.fixture
def server(upstream: ScriptedUpstream, settings: Settings) -> Iterator[Server]:
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
