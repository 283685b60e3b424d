"""Load and lifetime: 10,000 requests at concurrency 100 without an error or memory growth,
and SIGTERM under load drains the streams in flight and loses no stored response."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import DATABASES
from .harness import ScriptedUpstream, check_stream, output, slow_exchange, start_cli, text_exchange

REQUESTS = 10_000
CONCURRENCY = 100
WARM_UP = 2_000
GROWTH_ALLOWED = 8 * 2**20
"""Resident memory the server may gain from the end of the warm-up to the end of the run.

Not zero: after the warm-up the process still grows a little without leaking — CPython's
allocator keeps the arenas the busiest moment touched, SQLite's page cache fills towards its
bound as stored responses accumulate, and lazily made objects appear. Measured: under 3 MiB.
A leak of a kilobyte per request would add 8 MB over the 8,000 measured requests, so this
bound catches any leak of that size or more.
"""


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


KINDS: list[tuple[str, dict[str, Any], bool]] = [
    ("/responses", {"model": "test-model", "input": "hi", "store": True}, True),
    ("/responses", {"model": "test-model", "input": "hi", "store": False}, False),
    ("/chat/completions", {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}, True),
    ("/chat/completions", {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}, False),
]


async def _one(client: httpx.AsyncClient, number: int) -> str | None:
    """Request `number` (its kind by rotation); None when its answer is whole and right, else what went wrong."""
    path, body, stream = KINDS[number % len(KINDS)]
    try:
        if not stream:
            answer = await client.post(path, json=body)
            if answer.status_code != 200:
                return f"{path}: {answer.status_code} {answer.text[:200]}"
            data = answer.json()
            text = data["output_text"] if path == "/responses" else data["choices"][0]["message"]["content"]
            return None if text == "Hello there, load." else f"{path}: {text!r}"
        async with client.stream("POST", path, json={**body, "stream": True}) as answer:
            raw = (await answer.aread()).decode()
        if answer.status_code != 200 or not raw.endswith("data: [DONE]\n\n"):
            return f"{path} stream: {answer.status_code} {raw[-200:]!r}"
        if path == "/responses" and '"type":"response.completed"' not in raw:
            return f"{path} stream: no response.completed"
        return None
    except httpx.HTTPError as exc:
        return f"{path}: {exc!r}"


async def _load(base: str, first: int, count: int) -> list[str]:
    """`count` requests from `CONCURRENCY` clients, each on one keep-alive connection of its own.

    One client per connection, not one pool of them: httpcore's pool checks every one of its
    connections for each request it sends (`has_expired`, through anyio's socket attributes), so
    a pool of 100 took twice the server's CPU and the clients, not the server, set the pace.
    """
    # uvicorn closes a connection idle for 5 s, httpx reuses one idle for up to 5 s: with equal
    # bounds a request can be sent on a connection the server is closing. Clients must expire
    # idle connections sooner than the server does.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2)
    queue = iter(range(first, first + count))
    errors: list[str] = []

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
            for number in queue:
                if (error := await _one(client, number)) is not None:
                    errors.append(error)

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return errors


def test_ten_thousand_requests_at_concurrency_100_without_errors_or_memory_growth(upstream: ScriptedUpstream):
    upstream.responder = lambda body: text_exchange("Hello there, load.", pieces=3)
    process, url = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe",  # type: ignore[attr-defined]
                             "--log-level", "warning")  # fmt: skip
    try:
        base = f"{url}/v1"
        assert asyncio.run(_load(base, 0, WARM_UP)) == []
        warm = rss(process.pid)
        errors = asyncio.run(_load(base, WARM_UP, REQUESTS - WARM_UP))
        end = rss(process.pid)
        assert errors == [], errors[:5]
        assert len(upstream.requests) == REQUESTS
        assert end - warm <= GROWTH_ALLOWED, f"grew {(end - warm) / 2**20:.1f} MiB after warm-up (at {warm / 2**20:.0f} MiB)"
    finally:
        process.terminate()
        process.wait(30)
    assert "Traceback" not in output(process)


async def _stream_until_terminal(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any] | None:
    """A streamed response's final Response if its terminal event arrived, else None."""
    try:
        async with client.stream("POST", "/responses", json={**body, "stream": True}) as answer:
            events = []
            async for line in answer.aiter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
    except httpx.HTTPError:
        events = events if "events" in locals() else []
    terminal = [e for e in events if e["type"] in ("response.completed", "response.failed", "response.incomplete")]
    if not terminal:
        return None
    return check_stream(events)


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("drained", [True, False], ids=["drained", "cut-short"])
def test_sigterm_under_load_loses_no_stored_response(upstream: ScriptedUpstream, database_url, drained):
    """With time to drain, every stream in flight ends whole; cut short (a shutdown timeout
    shorter than the answers), streams end without their terminal event and background runs
    end failed. Either way every response a client saw end is stored as it saw it, and no
    background response is left running."""
    upstream.time_scale = 1.0
    upstream.responder = lambda body: slow_exchange(20, 0.05, letter="z")  # a second per answer
    args = ("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url", database_url,  # type: ignore[attr-defined]
            "--shutdown-timeout", "30" if drained else "0.2", "--log-level", "warning")  # fmt: skip
    process, url = start_cli(*args)

    async def load() -> tuple[list[dict[str, Any]], list[str]]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=f"{url}/v1", limits=limits, timeout=60) as client:
            streams = [asyncio.ensure_future(_stream_until_terminal(client, {"model": "test-model", "input": "x"}))
                       for _ in range(60)]  # fmt: skip
            background = []
            for _ in range(10):
                answer = await client.post("/responses", json={"model": "test-model", "input": "x", "background": True})
                background.append(answer.json()["id"])
            while len(upstream.requests) < 70:  # every request reached the engine: all are in flight
                await asyncio.sleep(0.02)
            process.send_signal(signal.SIGTERM)
            finished = [response for response in await asyncio.gather(*streams) if response is not None]
            return finished, background

    try:
        finished, background = asyncio.run(load())
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        process.kill()
    if drained:
        assert len(finished) == 60, "every stream in flight was drained to its end"
    assert all(response["status"] == "completed" and response["output_text"] == "z" * 20 for response in finished)

    process, url = start_cli(*args)  # the same database, a new process
    try:
        for response in finished:
            stored = httpx.get(f"{url}/v1/responses/{response['id']}").json()
            assert stored["status"] == "completed" and stored["output"] == response["output"]
        for response_id in background:
            stored = httpx.get(f"{url}/v1/responses/{response_id}").json()
            if drained:
                assert stored["status"] == "completed" and stored["output_text"] == "z" * 20
            else:
                assert stored["status"] in ("completed", "failed"), "no background response is left running"
    finally:
        process.terminate()
        process.wait(30)
