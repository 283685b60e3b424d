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

from . import postgres
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


POSTGRES = postgres.choose()
DATABASES = ["sqlite", "postgres"] if POSTGRES.available else ["sqlite"]
"""State tests run on both stores: PostgreSQL as tests/postgres.py finds or starts it."""


def pytest_configure(config: pytest.Config) -> None:
    if not POSTGRES.available and os.environ.get(postgres.REQUIRE_VARIABLE):
        raise pytest.UsageError(f"{postgres.REQUIRE_VARIABLE} is set, but {POSTGRES.summary}")


NO_SKIPS = "RESPONSEKIT_NO_SKIPS"
"""Set by CI (.ci/run): a test that would skip (HAProxy, Chromium or the llama extra missing)
fails instead, so that a green CI run has run every test."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get(NO_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"{NO_SKIPS} is set, and this test skipped: {report.longrepr}"


_private_cluster_used = False


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not POSTGRES.available or _private_cluster_used:
        terminalreporter.write_line(POSTGRES.summary)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The PostgreSQL server of the session (its maintenance database), started on first use
    when it is a private cluster."""
    global _private_cluster_used
    if POSTGRES.url:
        yield POSTGRES.url
        return
    assert POSTGRES.pg_ctl
    _private_cluster_used = True
    with postgres.private_cluster(POSTGRES.pg_ctl) as url:
        yield url


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: SQLite by default, or the parameter `postgres`."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    server: str = request.getfixturevalue("postgres_url")
    name = f"rk_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_postgres(server, f'CREATE DATABASE "{name}"'))
    yield server.rsplit("/", 1)[0] + f"/{name}"
    asyncio.run(_postgres(server, f'DROP DATABASE "{name}" WITH (FORCE)'))


async def _postgres(server: str, sql: str) -> None:
    connection = await asyncpg.connect(server)
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


# --- engines: a tiny GGUF run in-process and behind llama-cpp-python's server ---------


@dataclass
class EngineServer:
    """ResponseKit serving models itself (or through a raw-completions upstream)."""

    url: str
    app: object

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def client(self, **options: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key="test", max_retries=0, **options)  # type: ignore[arg-type]

    def engine(self) -> object:
        """The in-process backend (its `stats` count finished and cancelled generations)."""
        return self.app.state.router.engines[0]  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Hermes model (tests/tiny_gguf.py), written once per session."""
    from .tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real Gemma 3 270M GGUF (Q4_K_M) of the `llama` extra, assembled once and kept in
    the user's cache between test runs."""
    from responsekit.backends.default_model import model_file

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "responsekit-tests"
    return model_file(cache)


def _engine_settings(directory: Path, **options: object) -> Settings:
    return Settings(probe=False, data_dir=directory, database_url=f"sqlite:///{directory / 'state.db'}", **options)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def engine_server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """ResponseKit running the tiny model in-process with two sequences."""
    from responsekit.config import LocalModel

    settings = _engine_settings(tmp_path_factory.mktemp("engine"), models=[LocalModel(path=tiny_gguf, parallel=2)])
    app = create_app(settings)
    with serve(app) as url:
        yield EngineServer(url, app)


@pytest.fixture(scope="session")
def llama_cpp_upstream(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m llama_cpp.server` serving the tiny model on loopback; yields its /v1 URL."""
    from .llama_server import llama_cpp_server

    with llama_cpp_server(tiny_gguf, "tiny", tmp_path_factory.mktemp("llama-server"), "--n_ctx", "4096",
                          "--verbose", "false") as url:  # fmt: skip
        yield url


@pytest.fixture(scope="session")
def completions_server(tiny_gguf: Path, llama_cpp_upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """ResponseKit in front of llama-cpp-python's server, through the raw-completions backend
    (the template read from the same GGUF; no repeat penalty, as the in-process engine)."""
    upstream = UpstreamConfig(name="llama-cpp-python", base_url=llama_cpp_upstream, api="completions",
                              chat_template=tiny_gguf, extra_body={"repeat_penalty": 1.0}, models=["tiny"])  # fmt: skip
    app = create_app(_engine_settings(tmp_path_factory.mktemp("completions"), upstreams=[upstream]))
    with serve(app) as url:
        yield EngineServer(url, app)
