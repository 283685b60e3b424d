"""What stored state costs, on SQLite and PostgreSQL.

- store:true vs store:false: the time one non-streaming response takes end to end (the
  added part is the transaction that stores the request, its items and its output);
- a chain of depth 100: the time to load its history from the store, and a request
  continuing it compared with a request without history;
- usage records (`store/usage.py`), written as the usage ledger writes them, a batch to a
  transaction: the CPU (this process's, every thread) and the time each record costs, by batch
  size (a busy gateway writes about a thousand a second, once a second; a quiet one a few).

The engine is `bench/fake_engine.py` in its own process, ResponseKit is `responsekit serve`
in another. Run: `.venv/bin/python bench/state.py [--postgres postgresql://…]`
(default: $RESPONSEKIT_TEST_DATABASE_URL when set).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
from machine import describe

from responsekit.store import Store
from responsekit.store.usage import UsageRecord, insert

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def process(*command: str, url: str) -> Iterator[None]:
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError(f"{command[:3]} did not start") from None
                time.sleep(0.1)
        yield
    finally:
        child.terminate()
        child.wait(10)


@contextmanager
def fresh_postgres(base: str) -> Iterator[str]:
    name = f"rk_bench_{uuid.uuid4().hex[:10]}"

    async def run(sql: str) -> None:
        connection = await asyncpg.connect(base)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(run(f'DROP DATABASE "{name}" WITH (FORCE)'))


def timed(client: httpx.Client, body: dict, repeats: int) -> tuple[list[float], list[dict]]:
    times, answers = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        answer = client.post("/v1/responses", json=body)
        times.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
        answers.append(answer.json())
    return times, answers


def measure(database_url: str, engine_url: str, requests: int) -> dict[str, float]:
    port = free_port()
    serve = [sys.executable, "-m", "responsekit", "serve", "--port", str(port), "--no-probe",
             "--upstream", f"bench={engine_url}", "--database-url", database_url, "--log-level", "warning"]  # fmt: skip
    with process(*serve, url=f"http://127.0.0.1:{port}/health"), httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=30
    ) as client:
        base = {"model": "bench-model", "input": "Say something."}
        timed(client, base, 30)  # warm up
        ephemeral, _ = timed(client, {**base, "store": False}, requests)
        stored, _ = timed(client, base, requests)

        previous = None
        for _ in range(100):
            _, (answer,) = timed(client, {**base, "previous_response_id": previous} if previous else base, 1)
            previous = answer["id"]
        deep, _ = timed(client, {**base, "store": False, "previous_response_id": previous}, 20)
        shallow, _ = timed(client, {**base, "store": False}, 20)

    async def load_chain() -> list[float]:
        store = await Store.open(database_url)
        try:
            times = []
            for _ in range(20):
                started = time.perf_counter()
                items = await store.history("", previous)
                times.append((time.perf_counter() - started) * 1000)
            assert items is not None and len(items) == 200
            return times
        finally:
            await store.close()

    chain = asyncio.run(load_chain())
    median = statistics.median
    return {
        "store:false": median(ephemeral),
        "store:true": median(stored),
        "added": median(stored) - median(ephemeral),
        "load chain 100": median(chain),
        "request at depth 100": median(deep),
        "request at depth 0": median(shallow),
    }


USAGE_BATCHES = (15, 100, 1000)


async def usage_writes(database_url: str, rounds: int = 10) -> dict[int, tuple[float, float]]:
    """Per batch size: µs of CPU and of wall time per usage record written, over `rounds` batches."""
    store = await Store.open(database_url)
    try:
        found = {}
        for size in USAGE_BATCHES:
            cpu = wall = 0.0
            for number in range(rounds + 2):  # the first two warm the statement cache
                now = int(time.time() * 1000)
                records = [UsageRecord(now + i, "k" * 64, "key_bench", f"req_{uuid.uuid4().hex}", "/v1/responses",
                                       "bench-model", "bench", 20, 0, 32, 0, "200", 3) for i in range(size)]  # fmt: skip
                cpu_before, wall_before = time.process_time(), time.perf_counter()
                await insert(store.database, records)
                if number >= 2:
                    cpu += time.process_time() - cpu_before
                    wall += time.perf_counter() - wall_before
            found[size] = (cpu / (rounds * size) * 1e6, wall / (rounds * size) * 1e6)
        return found
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=os.environ.get("RESPONSEKIT_TEST_DATABASE_URL"))
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    engine_port = free_port()
    engine = [sys.executable, str(HERE / "fake_engine.py"), "--port", str(engine_port), "--tokens", "32"]
    results: dict[str, dict[str, float]] = {}
    usage: dict[str, dict[int, tuple[float, float]]] = {}
    with process(*engine, url=f"http://127.0.0.1:{engine_port}/v1/models"):
        engine_url = f"http://127.0.0.1:{engine_port}/v1"
        with tempfile.TemporaryDirectory() as directory:
            results["SQLite"] = measure(f"sqlite:///{directory}/bench.db", engine_url, args.requests)
            usage["SQLite"] = asyncio.run(usage_writes(f"sqlite:///{directory}/bench.db"))
        if args.postgres:
            with fresh_postgres(args.postgres) as url:
                results["PostgreSQL"] = measure(url, engine_url, args.requests)
                usage["PostgreSQL"] = asyncio.run(usage_writes(url))

    print(f"machine: {describe()}")
    print(f"median of {args.requests} sequential non-streaming responses (32 tokens each), milliseconds\n")
    columns = list(next(iter(results.values())))
    print("| store | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.2f}" for c in columns) + " |")
    print("\nusage records written a batch to a transaction, µs per record: CPU (this process) / time\n")
    print("| store | " + " | ".join(f"{size:,} a batch" for size in USAGE_BATCHES) + " |")
    print("|---|" + "---:|" * len(USAGE_BATCHES))
    for name, row in usage.items():
        print(f"| {name} | " + " | ".join(f"{row[size][0]:.1f} / {row[size][1]:.1f}" for size in USAGE_BATCHES) + " |")


if __name__ == "__main__":
    main()
