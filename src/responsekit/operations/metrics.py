"""Prometheus metrics: what a gateway's operators watch, at `GET /metrics`.

Names follow the OpenTelemetry GenAI semantic conventions where they define one
(`gen_ai.server.request.duration` → `gen_ai_server_request_duration_seconds`, …), the rest are
`responsekit_*`. Labels stay bounded: routes are templates, a model label is a name the
router serves (else `other`), never an id.

The gateway's overhead is benchmarked, so a generation is observed once: `rendered()` hands
its `Observation` the first output token (once), each `Usage` and the `Error`, and the
observation writes its samples when the generation ends. Label children are cached, since
`labels()` costs more than the sample it finds. Background runs and the ingestion queue are
read when scraped (`ScrapeTime`), costing nothing between scrapes, and so are the members of
engine pools (`PoolMembers`), labelled by their configured upstream names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..canonical.events import (
    Error,
    Event,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallStart,
    Usage,
)
from ..store.database import Connection, Database, Listener, Row

OUTPUT = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallStart)
"""Events that are output tokens: the first one is the time to first token."""

# Bucket boundaries the GenAI semantic conventions advise for each instrument.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

CLIENT_LEFT = "499"
"""The status of a generation whose client left (or whose run was cancelled) before its end."""


def engine_fault(error: Error) -> str | None:
    """The kind of engine fault behind an `Error` event, or None when the engine is not at fault
    (an overflowing prompt, a request the engine refused as invalid)."""
    if error.fault is not None:
        return error.fault
    if error.code == "rate_limit_exceeded":
        return "rate_limited"
    if error.code == "timeout":
        return "timeout"
    if error.status >= 500:
        return "server_error"
    return None


class Metrics:
    """The app's instruments, in a registry of its own (not the process's global one)."""

    def __init__(self, serves: Callable[[str], bool]) -> None:
        self.serves = serves
        """Whether the router serves a model name: only those become label values."""
        self.registry = registry = CollectorRegistry()
        self.duration = Histogram("gen_ai_server_request_duration_seconds", "Time from a generation request's arrival to "
                                  "its end.", ["route", "model", "status"], buckets=DURATION_BUCKETS, registry=registry)  # fmt: skip
        self.ttft = Histogram("gen_ai_server_time_to_first_token_seconds", "Time from a request's arrival to its first "
                              "output token (text, reasoning, refusal or tool call).", ["route", "model"],
                              buckets=TTFT_BUCKETS, registry=registry)  # fmt: skip
        self.tpot = Histogram("gen_ai_server_time_per_output_token_seconds", "Time per output token after the first.",
                              ["route", "model"], buckets=TPOT_BUCKETS, registry=registry)  # fmt: skip
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens per generation as the engine counted them "
                                "(the gateway is the engine's client).", ["model", "gen_ai_token_type"],
                                buckets=TOKEN_BUCKETS, registry=registry)  # fmt: skip
        self.requests = Counter("responsekit_requests", "Generation requests by route, model and status (HTTP status "
                                "a non-streaming client gets; 499: the client left).", ["route", "model", "status"],
                                registry=registry)  # fmt: skip
        self.http = Counter("responsekit_http_requests", "Every HTTP answer by method, route template and status: "
                            "requests refused before any engine (400, 401, 404, 413…) included; `unmatched` for "
                            "paths no route serves.", ["method", "route", "status"], registry=registry)  # fmt: skip
        self.streams = Gauge("responsekit_streams_in_flight", "Streamed generations being sent.", registry=registry)
        self.engine_errors = Counter("responsekit_engine_errors", "Engine faults by upstream and kind (refused, dropped, "
                                     "timeout, rate_limited, server_error, malformed).", ["upstream", "kind"],
                                     registry=registry)  # fmt: skip
        self.store = Histogram("responsekit_store_seconds", "Store operations: transactions, writes and queries.",
                               ["operation"], buckets=STORE_BUCKETS, registry=registry)  # fmt: skip
        self.web = Counter("responsekit_web_operations", "Web searches and page fetches of the web_search tools, by "
                           "provider and outcome (ok, timeout, unreachable, unauthorized, rate_limited, server_error, "
                           "bad_answer, error; for fetches refused, too_large, unsupported, http_error).",
                           ["operation", "provider", "outcome"], registry=registry)  # fmt: skip
        self._children: dict[tuple[Any, ...], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, cached."""
        key = (metric, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def web_operation(self, operation: str, provider: str, outcome: str) -> None:
        """One web search or page fetch (`tools/web/`) and how it ended."""
        self.child(self.web, operation, provider, outcome).inc()

    def observation(self, route: str, stream: bool) -> Observation:
        """A generation request that arrived now on `route` (a template such as `/v1/responses`)."""
        return Observation(self, route, stream)

    def answered(self, method: str, route: str | None, status: int | None) -> None:
        """One HTTP answer (`api/request_ids.py`); `status` None: the client left before any."""
        self.child(self.http, method, route or "unmatched", CLIENT_LEFT if status is None else str(status)).inc()

    def model_label(self, model: str) -> str:
        return model if self.serves(model) else "other"

    def timed(self, database: Database) -> Database:
        return TimedDatabase(database, {kind: self.child(self.store, kind)
                                        for kind in ("transaction", "execute", "query")})  # fmt: skip


class Observer(Protocol):
    """What watches a generation as `rendering.rendered` drives it: the metrics' `Observation`,
    or the meter of limits and usage (`orchestration/limits.py`) around one."""

    @property
    def first_token(self) -> float | None: ...

    def serving(self, model: str, upstream: str) -> None: ...

    def begin(self) -> None: ...

    def saw(self, event: Event) -> None: ...

    def end(self, status: str) -> None: ...


class Observation:
    """One generation request, from its arrival to its end (see `rendering.rendered`)."""

    __slots__ = (
        "ended",
        "first_token",
        "input_tokens",
        "metrics",
        "model",
        "output_tokens",
        "route",
        "started",
        "stream",
        "upstream",
    )  # fmt: skip

    def __init__(self, metrics: Metrics, route: str, stream: bool) -> None:
        self.metrics = metrics
        self.route = route
        self.stream = stream
        self.model = ""
        self.upstream = ""
        self.started = time.perf_counter()
        self.first_token: float | None = None
        self.input_tokens = self.output_tokens = 0
        self.ended = False

    def serving(self, model: str, upstream: str) -> None:
        """The model and upstream the router chose."""
        self.model = model
        self.upstream = upstream

    def begin(self) -> None:
        if self.stream:
            self.metrics.streams.inc()

    def saw(self, event: Event) -> None:
        """Called for the first output token, then only for `Usage` and `Error` events."""
        if isinstance(event, Usage):
            self.input_tokens += event.input_tokens  # several generations when server tools ran
            self.output_tokens += event.output_tokens
        elif isinstance(event, Error):
            kind = engine_fault(event)
            if kind is not None:
                self.metrics.child(self.metrics.engine_errors, self.upstream or "none", kind).inc()
        elif self.first_token is None and isinstance(event, OUTPUT):
            self.first_token = time.perf_counter()

    def end(self, status: str) -> None:
        if self.ended:
            return
        self.ended = True
        now = time.perf_counter()
        metrics, route = self.metrics, self.route
        model = metrics.model_label(self.model)
        if self.stream:
            metrics.streams.dec()
        metrics.child(metrics.requests, route, model, status).inc()
        metrics.child(metrics.duration, route, model, status).observe(now - self.started)
        if self.first_token is not None:
            metrics.child(metrics.ttft, route, model).observe(self.first_token - self.started)
            if self.output_tokens > 1:
                metrics.child(metrics.tpot, route, model).observe((now - self.first_token) / (self.output_tokens - 1))
        if self.input_tokens or self.output_tokens:
            metrics.child(metrics.tokens, model, "input").observe(self.input_tokens)
            metrics.child(metrics.tokens, model, "output").observe(self.output_tokens)


class TimedDatabase:
    """A `Database` whose transactions and statements are timed (a statement inside a
    transaction counts in the transaction's time, not on its own)."""

    def __init__(self, database: Database, histograms: dict[str, Any]) -> None:
        self.database = database
        self.dialect = database.dialect
        self.shared_notifications = database.shared_notifications
        self._transaction = histograms["transaction"]
        self._execute = histograms["execute"]
        self._query = histograms["query"]

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        return _TimedTransaction(self.database.transaction(), self._transaction)

    async def execute(self, sql: str, *args: Any) -> None:
        started = time.perf_counter()
        try:
            await self.database.execute(sql, *args)
        finally:
            self._execute.observe(time.perf_counter() - started)

    async def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        started = time.perf_counter()
        try:
            await self.database.executemany(sql, rows)
        finally:
            self._execute.observe(time.perf_counter() - started)

    async def notify(self, channel: str, payload: str) -> None:
        await self.database.notify(channel, payload)

    async def listen(self, channel: str, listener: Listener) -> None:
        await self.database.listen(channel, listener)

    async def changed_elsewhere(self) -> bool:
        return await self.database.changed_elsewhere()

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        started = time.perf_counter()
        try:
            return await self.database.fetch(sql, *args)
        finally:
            self._query.observe(time.perf_counter() - started)

    async def fetchrow(self, sql: str, *args: Any) -> Row | None:
        started = time.perf_counter()
        try:
            return await self.database.fetchrow(sql, *args)
        finally:
            self._query.observe(time.perf_counter() - started)

    async def close(self) -> None:
        await self.database.close()


class ScrapeTime(Collector):
    """Gauges read when scraped: background runs by state and the ingestion queue, in this process."""

    def __init__(self, runs: Callable[[], dict[str, int]], ingestion: Callable[[], dict[str, int]]) -> None:
        self.runs = runs
        self.ingestion = ingestion

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily("responsekit_background_runs", "Background responses running in this process, by "
                                 "state (running; finishing: writing their end).", labels=["state"])  # fmt: skip
        for state, count in self.runs().items():
            runs.add_metric([state], count)
        yield runs
        queue = GaugeMetricFamily("responsekit_vector_store_ingestion_queue", "Vector store files this process has to "
                                  "ingest: waiting for a worker, or being ingested.", labels=["state"])  # fmt: skip
        for state, count in self.ingestion().items():
            queue.add_metric([state], count)
        yield queue


class PoolMembers(Collector):
    """Each pool member's state, read when scraped: whether it takes requests (0 while
    it cools down after failing), its requests in flight, and its failures."""

    def __init__(self, members: Callable[[], list[Any]]) -> None:
        self.members = members
        """The router's `members()`: objects with `name` and `state()`."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        healthy = GaugeMetricFamily("responsekit_upstream_healthy", "1 while a pool member takes requests, 0 while "
                                    "it cools down after failing.", labels=["upstream"])  # fmt: skip
        in_flight = GaugeMetricFamily("responsekit_upstream_in_flight", "Requests a pool member is generating.",
                                      labels=["upstream"])  # fmt: skip
        failures = CounterMetricFamily("responsekit_upstream_failures", "Failures of a pool member (refused, reset, "
                                       "502/503, timed out, failed probes).", labels=["upstream"])  # fmt: skip
        for member in self.members():
            state = member.state()
            healthy.add_metric([member.name], 1 if state["state"] == "healthy" else 0)
            in_flight.add_metric([member.name], state["in_flight"])
            failures.add_metric([member.name], state["failures"])
        yield healthy
        yield in_flight
        yield failures


class _TimedTransaction:
    """A transaction of `TimedDatabase`, timed from its start to its commit: a class rather than
    an `asynccontextmanager`, whose generator every stored response and usage write would pay for."""

    __slots__ = ("_histogram", "_inner", "_started")

    def __init__(self, inner: AbstractAsyncContextManager[Connection], histogram: Any) -> None:
        self._inner = inner
        self._histogram = histogram
        self._started = 0.0

    async def __aenter__(self) -> Connection:
        self._started = time.perf_counter()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            self._histogram.observe(time.perf_counter() - self._started)
            raise

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> bool | None:  # fmt: skip
        try:
            return await self._inner.__aexit__(kind, error, trace)
        finally:
            self._histogram.observe(time.perf_counter() - self._started)
