"""How late a follower on one replica hears of a background run's events on another.

Two `responsekit serve` replicas share one PostgreSQL; `bench/fake_engine.py` streams answers
of `--tokens` tokens, one every `--intervals` seconds (one engine each). A client starts background streams on
replica A, reading each event as A sends it, while a follower on replica B reads the same
run (`GET /v1/responses/{id}?stream=true`). The delay of an event is when B's follower got
it minus when A's client did: A's flush of its events, the commit, the notification (or
B's next poll), B's read and its HTTP. Only events A sent after B's follower was reading
count (not the catch-up when it starts).

`--compare-with REV` measures the same with the code of git revision REV as well (e.g. a
commit before LISTEN/NOTIFY, whose followers polled every 100 ms).

Run: `.venv/bin/python bench/replicas.py [--postgres postgresql://…] [--compare-with REV]`
(default: $RESPONSEKIT_TEST_DATABASE_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
from machine import describe
from state import free_port, fresh_postgres, process

HERE = Path(__file__).parent


def replica(stack: ExitStack, source: Path, database_url: str, engines: list[str]) -> str:
    """A replica running the code in `source` (a `src` directory); returns its URL."""
    port = free_port()
    command = [sys.executable, "-m", "responsekit", "serve", "--port", str(port), "--no-probe",
               "--database-url", database_url, "--log-level", "warning"]  # fmt: skip
    for n, url in enumerate(engines):
        command += ["--upstream", f"engine{n}={url}"]
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(source)
    try:
        stack.enter_context(process(*command, url=f"http://127.0.0.1:{port}/health"))
    finally:
        os.environ.pop("PYTHONPATH")
        if previous is not None:
            os.environ["PYTHONPATH"] = previous
    return f"http://127.0.0.1:{port}"


async def one_run(a: httpx.AsyncClient, b: httpx.AsyncClient, model: str) -> list[float]:
    """Delays (ms) of one background run's events, A's client to B's follower."""
    at_a: dict[int, float] = {}
    at_b: dict[int, float] = {}
    started = asyncio.get_running_loop().create_future()
    following = asyncio.Event()

    async def read(answer: httpx.Response, times: dict[int, float]) -> None:
        async for line in answer.aiter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                times[event["sequence_number"]] = time.perf_counter()
                if not started.done():
                    started.set_result(event["response"]["id"])
                if times is at_b:
                    following.set()

    async def on_a() -> None:
        body = {"model": model, "input": "Count.", "stream": True, "background": True}
        async with a.stream("POST", "/v1/responses", json=body) as answer:
            await read(answer, at_a)

    async def on_b() -> None:
        response_id = await started
        async with b.stream("GET", f"/v1/responses/{response_id}", params={"stream": "true"}) as answer:
            await read(answer, at_b)

    await asyncio.gather(on_a(), on_b())
    terminal = max(at_a)  # held until stored on A as well: not an event's delivery
    catch_up = min(at_b.values())
    return [(at_b[n] - at_a[n]) * 1000 for n in at_a if n != terminal and n in at_b and at_a[n] > catch_up]


async def measure(a_url: str, b_url: str, model: str, runs: int, rounds: int) -> list[float]:
    delays: list[float] = []
    async with httpx.AsyncClient(base_url=a_url, timeout=60) as a, httpx.AsyncClient(base_url=b_url, timeout=60) as b:
        await one_run(a, b, model)  # warm up
        for _ in range(rounds):
            for result in await asyncio.gather(*(one_run(a, b, model) for _ in range(runs))):
                delays += result
    return delays


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=os.environ.get("RESPONSEKIT_TEST_DATABASE_URL"))
    parser.add_argument("--compare-with", metavar="REV", help="also measure the code of this git revision")
    parser.add_argument("--runs", type=int, default=6, help="background runs at a time")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--intervals", default="0.1,0.05,0.02", help="seconds between tokens (one engine each)")
    args = parser.parse_args()
    if not args.postgres:
        sys.exit("replicas need PostgreSQL: pass --postgres or set RESPONSEKIT_TEST_DATABASE_URL")
    print(describe())
    print()
    intervals = [float(value) for value in args.intervals.split(",")]
    print(f"{args.runs} background runs at a time, {args.rounds} rounds, {args.tokens} tokens each; "
          "delay from replica A's client to replica B's follower, in ms")  # fmt: skip
    print()
    print("| code | token interval | events | p50 | p95 | max |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as engines:
        sources = [("this tree", HERE.parent / "src")]
        if args.compare_with:
            archive = subprocess.run(["git", "archive", args.compare_with, "src"], cwd=HERE.parent, check=True,
                                     capture_output=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
            sources.append((args.compare_with, Path(scratch) / "src"))
        urls = []
        for n, interval in enumerate(intervals):
            port = free_port()
            urls.append(f"http://127.0.0.1:{port}/v1")
            engine = [sys.executable, str(HERE / "fake_engine.py"), "--port", str(port), "--model", f"model{n}",
                      "--tokens", str(args.tokens), "--token-interval", str(interval)]  # fmt: skip
            engines.enter_context(process(*engine, url=f"{urls[-1]}/models"))
        for label, source in sources:
            with ExitStack() as stack:
                database_url = stack.enter_context(fresh_postgres(args.postgres))
                a_url = replica(stack, source, database_url, urls)
                b_url = replica(stack, source, database_url, urls)
                for n, interval in enumerate(intervals):
                    delays = asyncio.run(measure(a_url, b_url, f"model{n}", args.runs, args.rounds))
                    print(f"| {label} | {interval * 1000:g} ms | {len(delays)} | {statistics.median(delays):.1f} "
                          f"| {percentile(delays, 0.95):.1f} | {max(delays):.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
