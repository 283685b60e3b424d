"""What OpenTelemetry traces cost, against a control (the target: within 5% of untraced).

One engine (`bench/fake_engine.py`, 32-token answers sent at once, so the gateway's own cost
is all there is) and four ResponseKit processes on it: two untraced (the second is the
control: how far two identical processes differ on this machine is the noise floor), one
tracing every request, and one sampling 5% of traces (`OTEL_TRACES_SAMPLER=parentbased_traceidratio`),
both exporting OTLP/HTTP to `bench/otlp_sink.py`. For each route, streamed and not, the same
load (C keep-alive connections, the next request as soon as an answer is whole) goes to each
process in turn, round after round; each cell's requests/s and the process's CPU time per
request are taken, and the table gives their medians over the rounds, against the first
untraced process.

Run: `.venv/bin/python bench/traces.py` (`--help` for options); prints a Markdown section for
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from gateway import (
    HERE,
    MODEL,
    chat_target,
    cpu_seconds,
    free_port,
    messages_target,
    responses_target,
    service,
)
from loadgen import Target, run
from machine import describe

SAMPLED = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.05"}
ROUTES = {"/v1/responses": b"response.completed", "/v1/chat/completions": b"[DONE]", "/v1/messages": b"message_stop"}


@dataclass
class Process:
    name: str
    port: int
    pid: int
    cells: dict[tuple[str, bool], tuple[list[float], list[float]]] = field(default_factory=dict)
    """(route, stream) → (requests/s of each round, CPU µs per request of each round)."""


def target(route: str, port: int) -> Target:
    if route == "/v1/responses":
        return responses_target(port, MODEL)
    if route == "/v1/chat/completions":
        return chat_target(port, MODEL)
    return messages_target(port, MODEL)


async def cell(process: Process, route: str, stream: bool, args: argparse.Namespace) -> None:
    load = target(route, process.port)
    load.last_marker = f"word{args.tokens - 1}".encode()
    load.terminal_marker = ROUTES[route] if stream else b""
    before = cpu_seconds(process.pid)
    samples, seconds, completed = await run(load, args.concurrency, stream, args.seconds, args.warmup)
    spent = cpu_seconds(process.pid) - before
    if len(samples) != sum(sample.ok for sample in samples):
        raise RuntimeError(f"{process.name} {route}: failed requests")
    rates, cpus = process.cells.setdefault((route, stream), ([], []))
    rates.append(len(samples) / seconds)
    cpus.append(spent / max(completed, 1) * 1e6)


def table(processes: list[Process]) -> str:
    base, *others = processes
    head = " | ".join(f"{p.name} req/s | × | CPU µs/req | ×" for p in others)
    lines = [f"| route | stream | {base.name} req/s | CPU µs/req | {head} |",
             "|---|---|" + "---:|" * (2 + 4 * len(others))]  # fmt: skip
    for key in base.cells:
        rate, cpu = (statistics.median(values) for values in base.cells[key])
        cells = [f"{rate:.0f}", f"{cpu:.0f}"]
        for process in others:
            other_rate, other_cpu = (statistics.median(values) for values in process.cells[key])
            cells += [f"{other_rate:.0f}", f"{other_rate / rate:.2f}", f"{other_cpu:.0f}", f"{other_cpu / cpu:.2f}"]
        lines.append(f"| {key[0]} | {'yes' if key[1] else 'no'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def benchmark(args: argparse.Namespace) -> list[Process]:
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-traces-") as tmp:
        engine_port, sink_port = free_port(), free_port()
        engine_url = f"http://127.0.0.1:{engine_port}/v1"
        stack.enter_context(service("engine", [sys.executable, str(HERE / "fake_engine.py"), "--port", str(engine_port),
                                               "--tokens", str(args.tokens)], f"{engine_url}/models"))  # fmt: skip
        stack.enter_context(service("otlp-sink", [sys.executable, str(HERE / "otlp_sink.py"), "--port", str(sink_port)],
                                    f"http://127.0.0.1:{sink_port}/"))  # fmt: skip
        exporting = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}"}
        processes = []
        for name, env in (("untraced", {}), ("control", {}), ("all traced", exporting),
                          ("5% sampled", {**exporting, **SAMPLED})):  # fmt: skip
            port = free_port()
            command = [sys.executable, "-m", "responsekit", "serve", "--upstream", f"bench={engine_url}", "--no-probe",
                       "--port", str(port), "--data-dir", str(Path(tmp) / name.replace(" ", "-").replace("%", ""))]  # fmt: skip
            child = stack.enter_context(service(f"responsekit {name}", command, f"http://127.0.0.1:{port}/health", env=env))
            processes.append(Process(name, port, child.pid))
        for round_number in range(args.rounds):
            for route in ROUTES:
                for stream in (True, False):
                    for process in processes:
                        await cell(process, route, stream, args)
            print(f"round {round_number + 1} of {args.rounds} done", file=sys.stderr)
        return processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per cell")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each cell")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32, help="tokens per answer")
    args = parser.parse_args()
    started = time.monotonic()
    processes = asyncio.run(benchmark(args))
    print("\n".join([
        "## What traces cost, against a control (`bench/traces.py`)", "",
        f"`.venv/bin/python bench/traces.py --rounds {args.rounds} --seconds {args.seconds:g}`",
        (f"{datetime.date.today()}, {describe()}; {args.tokens}-token answers sent at once, C={args.concurrency}, "
         f"{args.rounds} rounds ({(time.monotonic() - started) / 60:.0f} minutes); medians over the rounds, "
         "× against the first untraced process."), "",
        table(processes),
    ]))  # fmt: skip


if __name__ == "__main__":
    main()
