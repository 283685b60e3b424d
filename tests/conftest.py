from __future__ import annotations

import asyncio
import importlib.util
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig
from responsekit.tls import client_context

from . import postgres
from .harness import ScriptedUpstream, free_port, serve


def _share_tls_context() -> None:
    """The tests' own httpx calls (`httpx.get`, `httpx.post`, a client per test) share one SSL
    context, as the server's clients do (src/responsekit/tls.py).

    httpx makes each client a context of its own, loading the CA bundle: 37 ms of CPU for each
    of the suite's thousands of calls to a server on loopback, over plain HTTP, where no context
    is ever used (a third of the CPU of tests/test_messages.py and tests/test_state.py).
    """
    make_context = httpx._transports.default.create_ssl_context  # httpx passes keywords only

    def shared(**options: Any) -> Any:
        default = options.get("verify", True) is True and options.get("trust_env", True)
        if default and not options.get("cert") and not options.get("http2"):
            return client_context()
        return make_context(**options)

    httpx._transports.default.create_ssl_context = shared


_share_tls_context()


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started by a test (in-process or as a command) keep their state in its tmp_path."""
    monkeypatch.setenv("RESPONSEKIT_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture(autouse=True)
def _wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI run in-process (CliRunner) prints as wide as the servers `start_cli` starts: a
    message that names a file under tmp_path is not broken mid-word into rich's 80-column box,
    at a place that moved with the path's length (`pytest-9` or `pytest-10`, a worker's
    `popen-gw0/`)."""
    monkeypatch.setenv("COLUMNS", "200")


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


# --- how the suite is run: on pytest-xdist workers (`make test`), and `make test-fast` -------

SLOW_MODULES = {
    "test_real_clients", "test_claude_code", "test_gemini_cli", "test_attachments_clients", "test_long_session",  # real CLIs
    "test_ui",  # Chromium
    "test_load",  # 10,000 requests; SIGTERM under load
    "test_packaging",  # a fresh virtualenv and `pip install`
}  # fmt: skip
SLOW_TESTS = {
    ("test_front", "test_claude_code_finds_the_server_answering"),
    ("test_web_search", "test_codex_cli_searches_the_web"),
    ("test_web_search", "test_vercel_ai_sdk_provider_web_search"),
    ("test_web_search", "test_claude_code_web_search_tool"),
    ("test_web_search", "test_claude_code_web_fetch_through_connect_claude"),
    ("test_connect_codex", "test_without_codex_every_model_gets_an_entry_codex_accepts"),
    ("test_connect_codex", "test_with_codex_the_entry_is_cloned_from_its_catalog_and_compacts_at_its_limit"),
    ("test_tool_search", "test_codex_searches_its_mcp_tools"),
    ("test_tool_search", "test_claude_code_searches_its_mcp_tools"),
}
"""`slow`: the real clients (Codex CLI, Claude Code, Gemini CLI, the JavaScript SDKs), the browser
(any test with a `page`), the load tests and the fresh install, which `make test-fast` leaves out."""

ALONE_MODULES = {"test_fairness", "test_replicas", "test_teams_replicas"}
ALONE_TESTS = {
    ("test_api_keys", "test_a_key_revoked_on_one_replica_is_refused_by_the_other_within_a_second"),
    ("test_state_processes", "test_a_replica_stalled_past_its_lease_gives_its_run_up"),
    ("test_state_processes", "test_a_replica_stalled_for_most_of_half_its_lease_keeps_its_run"),
    ("test_load", "test_ten_thousand_requests_at_concurrency_100_without_errors_or_memory_growth"),
}
"""`alone`: tests that hold processes to wall-clock bounds (a fair share of a busy engine in
seconds, a lease of 1.5-3 s, a revocation seen within a second, a replica failed within 0.1 s
of its lease), and the load test, whose 100 clients keep a connection idle for at most 2 s of
the server's 5 s and so must not be starved of the CPU. Other tests loading both CPUs could
delay the processes they time, so `make test` runs these after the rest, one at a time
(`-m alone`)."""

USUAL_ENGINE_PORTS = {
    ("test_models", "test_probing_finds_a_local_engine_and_starts_without_one"),
    ("test_default_model", "test_a_fresh_server_serves_the_default_model"),
}
"""Tests that probe the usual engine ports of the machine (8080, 11434…), one of which serves an
engine on such a port: they run one at a time, whichever worker runs them (`_one_at_a_time`)."""


def _test_of(item: pytest.Item) -> tuple[str, str]:
    module = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""  # type: ignore[attr-defined]
    return module, getattr(item, "originalname", item.name)


@pytest.hookimpl(tryfirst=True)  # before -m selects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        test = _test_of(item)
        module = test[0]
        if module in SLOW_MODULES or test in SLOW_TESTS or "page" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if module in ALONE_MODULES or test in ALONE_TESTS:
            item.add_marker(pytest.mark.alone)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # On pytest-xdist workers the `slow` tests, the longest ones, go first (in their order):
        # started last, one of them would keep its worker busy after the others ran out of work.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`-m alone` (make's run of the `alone` tests) collects only the modules that hold some:
    the others take a quarter of a minute to collect (tests/parsing derives its formats then)."""
    if (config.getoption("markexpr") or "").split(" ")[0] != "alone":
        return None
    modules = ALONE_MODULES | {module for module, _ in ALONE_TESTS}
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return collection_path.stem not in modules or None
    return None


@pytest.fixture(autouse=True)
def _one_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """The USUAL_ENGINE_PORTS tests hold a lock of the machine's while they run, so that no two of
    them (on two pytest-xdist workers, or in two test runs) run at once. A lock rather than an
    xdist_group: pytest-xdist's `loadgroup` scheduling hangs once a crashed worker is replaced."""
    if _test_of(request.node) not in USUAL_ENGINE_PORTS:  # type: ignore[arg-type]
        yield
        return
    from filelock import FileLock

    with FileLock(Path(tempfile.gettempdir()) / "responsekit-tests-usual-engine-ports.lock"):
        yield


_private_cluster_used = False


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker tells the controller whether it started a private cluster."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["private_cluster_used"] = _private_cluster_used


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the controller hears a worker end
def pytest_testnodedown(node: Any, error: object) -> None:
    global _private_cluster_used
    _private_cluster_used |= bool(getattr(node, "workeroutput", {}).get("private_cluster_used"))


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
    # Named after the pytest-xdist worker too (`gw0`…; `main` without xdist), so that what a
    # worker left behind says whose it was.
    name = f"rk_test_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{uuid.uuid4().hex[:12]}"
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


WINDOW = 32768
"""The context window `windowed_server`'s engine tells."""


@pytest.fixture
def windowed_server(upstream: ScriptedUpstream, settings: Settings) -> Iterator[Server]:
    """`server`, its engine telling a window of `WINDOW` tokens as llama.cpp's server does (`/props`)."""
    upstream.props = {"default_generation_settings": {"n_ctx": WINDOW}}
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on, and no other test worker will take (`free_port`)."""
    return free_port()


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
    """The tiny random-weight Hermes model (tests/tiny_gguf.py), written once per session (by
    each pytest-xdist worker, in its own directory: it takes well under a second)."""
    from .tiny_gguf import write_tiny_gguf

    _load_models_as_the_engine_does()
    return write_tiny_gguf(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real Gemma 3 270M GGUF (Q4_K_M) of the `llama` extra, assembled once and kept in
    the user's cache between test runs."""
    from filelock import FileLock

    from responsekit.backends.default_model import model_file

    _load_models_as_the_engine_does()

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "responsekit-tests"
    cache.mkdir(parents=True, exist_ok=True)
    # One test worker (pytest-xdist) assembles it while the others wait, then find it there.
    with FileLock(cache / "gemma.lock"):
        return model_file(cache)


def _load_models_as_the_engine_does() -> None:
    """Tests that load a GGUF with `llama_cpp.Llama` themselves get what the in-process engine
    sets up before it loads one: no AMX weight repacking, whose kernel crashes llama.cpp on Q4_K
    models on AMX CPUs (`llama_sequence.avoid_amx_repacking`, for the whole process). Without
    this, such a test was safe only where an engine test had run before it in the same process:
    on a pytest-xdist worker that had not, Gemma crashed the worker."""
    if importlib.util.find_spec("llama_cpp") is not None:
        from responsekit.backends.llama_sequence import avoid_amx_repacking

        avoid_amx_repacking()


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
