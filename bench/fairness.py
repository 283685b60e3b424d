"""What fair sharing of a busy engine buys: one key floods the engine with 64 parallel streams
while another sends one request at a time; the second key's time to first token, against the
same key alone.

The engine (`fake_engine.py --slots N`) generates N streams at once, first come, first served,
as llama.cpp's slots do. ResponseKit fronts it three times: with `max_concurrency = N` (the fair
queue per key: `backends/fairness.py`), once as configured by default (a place kept for a key
that generated lately) and once in strict turns (`keep_place_seconds = 0`), and without it
(every request goes to the engine, which takes them in arrival order). Measured: the second
key's time from sending to its first streamed text, p50 and p90 over `--samples` requests, alone
and under the flood, and the flood's answers per second while it was measured.

Run: `.venv/bin/python bench/fairness.py` (`--help` for options); prints a Markdown section for
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from gateway import free_port, service
from machine import describe

MODEL = "bench-model"


async def first_token(client: httpx.AsyncClient, url: str, key: str) -> float:
    """Seconds from sending a streamed chat request to its first text."""
    started = time.perf_counter()
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    seen: float | None = None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as answer:  # fmt: skip
        answer.raise_for_status()
        async for line in answer.aiter_lines():
            if seen is None and '"content":" word' in line.replace(": ", ":"):
                seen = time.perf_counter() - started
    assert seen is not None
    return seen


async def flooding(url: str, flood: int, seconds: float, done: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    """`flood` streams kept going for `seconds` (in a process of its own: reading 64 streams costs
    a client CPU time that would delay the measuring client's reads), counting its answers in `done`."""
    limits = httpx.Limits(max_connections=flood + 8, max_keepalive_connections=flood + 8)
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def loop() -> None:
            while time.monotonic() < deadline:
                body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body,
                                         headers={"Authorization": "Bearer flood"}) as answer:  # fmt: skip
                    async for _ in answer.aiter_raw():
                        pass
                with done.get_lock():  # type: ignore[attr-defined]
                    done.value += 1  # type: ignore[attr-defined]

        await asyncio.gather(*(loop() for _ in range(flood)))


def _flood_process(url: str, flood: int, seconds: float, done: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    asyncio.run(flooding(url, flood, seconds, done))


async def measure(url: str, samples: int) -> list[float]:
    async with httpx.AsyncClient(timeout=300) as client:
        times = []
        for _ in range(samples):
            times.append(await first_token(client, url, "single"))
            await asyncio.sleep(0.05)
    return times


def flooded(url: str, flood: int, samples: int) -> tuple[list[float], float]:
    """The second key's times under the flood, and the flood's answers per second meanwhile."""
    done = multiprocessing.Value("i", 0)
    process = multiprocessing.Process(target=_flood_process, args=(url, flood, 3600.0, done))  # stopped once measured
    process.start()
    try:
        time.sleep(3)  # the flood at its full depth
        before, started = done.value, time.perf_counter()
        times = asyncio.run(measure(url, samples))
        return times, (done.value - before) / (time.perf_counter() - started)
    finally:
        process.terminate()
        process.join()


def gateway(engine_url: str, max_concurrency: int | None, keep_place: bool, directory: Path):  # type: ignore[no-untyped-def]
    config = directory / f"fair-{max_concurrency}-{keep_place}.toml"
    bound = f"max_concurrency = {max_concurrency}\n" if max_concurrency else ""
    strict = "" if keep_place else "keep_place_seconds = 0\n"
    config.write_text(f'api_keys = ["flood", "single"]\nhost = "127.0.0.1"\n{strict}\n[[upstreams]]\nname = "engine"\n'
                      f'base_url = "{engine_url}/v1"\nmodels = ["{MODEL}"]\n{bound}')  # fmt: skip
    port = free_port()
    command = [sys.executable, "-m", "responsekit", "serve", "--config", str(config), "--port", str(port), "--no-probe",
               "--data-dir", str(directory / f"data-{max_concurrency}-{keep_place}"), "--log-level", "warning"]  # fmt: skip
    return service("gateway", command, f"http://127.0.0.1:{port}/health"), f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slots", type=int, default=8, help="streams the engine generates at once")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--token-interval", type=float, default=0.02)
    parser.add_argument("--flood", type=int, default=64, help="parallel streams of the flooding key")
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    engine_port = free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as scratch, service(
        "engine", [sys.executable, str(HERE / "fake_engine.py"), "--port", str(engine_port), "--tokens", str(args.tokens),
                   "--token-interval", str(args.token_interval), "--slots", str(args.slots), "--model", MODEL],
        f"{engine_url}/v1/models",
    ):  # fmt: skip
        for name, bound, keep_place in (
            (f"`max_concurrency = {args.slots}` (fair queue, a place kept)", args.slots, True),
            (f"`max_concurrency = {args.slots}`, `keep_place_seconds = 0` (strict turns)", args.slots, False),
            ("no `max_concurrency` (the engine's own queue)", None, True),
        ):
            started, url = gateway(engine_url, bound, keep_place, Path(scratch))
            with started:
                alone = asyncio.run(measure(url, args.samples))
                under, flood_rate = flooded(url, args.flood, args.samples)
            rows.append((name, alone, under, flood_rate))
    answer_seconds = args.tokens * args.token_interval
    print(f"### Fair sharing of a busy engine ({datetime.date.today()})\n")
    print(f"{describe()}. The engine generates {args.slots} streams at once ({args.tokens} tokens, "
          f"{args.token_interval * 1000:g} ms each: {answer_seconds:g} s an answer), the rest in arrival order; "
          f"one key keeps {args.flood} streams going while another sends {args.samples} streamed requests one "
          "at a time. Time to first text of the second key, ms:\n")
    print("| gateway | alone p50 | alone p90 | under the flood p50 | p90 | p50 ratio | p90 ratio | flood answers/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, alone, under_flood, flood_rate in rows:
        a50, a90 = statistics.median(alone), statistics.quantiles(alone, n=10)[-1]
        f50, f90 = statistics.median(under_flood), statistics.quantiles(under_flood, n=10)[-1]
        print(f"| {name} | {a50 * 1000:.0f} | {a90 * 1000:.0f} | {f50 * 1000:.0f} | {f90 * 1000:.0f} | "
              f"{f50 / a50:.2f} | {f90 / a90:.2f} | {flood_rate:.1f} |")


if __name__ == "__main__":
    main()
