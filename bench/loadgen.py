"""A lean HTTP/1.1 load generator: keep-alive connections driven by httptools on uvloop.

The client shares two cores with the engine and the gateway it measures, so it must
cost as little as possible per request and per chunk: no HTTP library, a C parser, and
one `bytes.find` per chunk until the first token arrives.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httptools


@dataclass(slots=True)
class Sample:
    """One request: when it started, when its first event and its first token arrived, when it ended."""

    start: float
    head: float
    """The first bytes of the body: the first event of a stream (for a non-streamed answer, its start)."""
    first: float
    end: float
    ok: bool


@dataclass(slots=True)
class Target:
    """Where a load goes and how one of its answers is recognised as whole."""

    host: str
    port: int
    path: str
    body: dict[str, object]
    headers: dict[str, str] = field(default_factory=dict)
    first_marker: bytes = b"word0"
    """Bytes that mark the first token in any API's framing (the engine's first word)."""
    last_marker: bytes = b""
    """Bytes an answer must contain to count as complete (the last word, the terminal event)."""
    terminal_marker: bytes = b""

    def request(self, stream: bool) -> bytes:
        payload = json.dumps({**self.body, "stream": stream}).encode()
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Content-Type: application/json",
                 f"Content-Length: {len(payload)}", *(f"{k}: {v}" for k, v in self.headers.items())]  # fmt: skip
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


class _Connection(asyncio.Protocol):
    """One keep-alive connection; `exchange()` sends a request and waits for its whole answer."""

    def __init__(self, marker: bytes) -> None:
        self._marker = marker
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._done: asyncio.Future[None] | None = None
        self.dead = False
        """Closed, or closing: the next request needs a new connection."""
        self.head = 0.0
        self.first = 0.0
        self._tail = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        self._fail(ConnectionError("connection closed"))

    def _fail(self, exc: Exception) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)

    def on_body(self, data: bytes) -> None:
        if not self.head:
            self.head = time.perf_counter()
        if not self.first:
            if self._marker in self._tail + data:
                self.first = time.perf_counter()
            else:
                self._tail = data[-len(self._marker):]
        self.body.append(data)

    def on_message_complete(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def status(self) -> int:
        return self._parser.get_status_code()

    async def exchange(self, raw: bytes) -> None:
        assert self._transport is not None
        self.head, self.first, self._tail, self.body = 0.0, 0.0, b"", []
        self._done = asyncio.get_running_loop().create_future()
        self._transport.write(raw)
        await self._done

    def close(self) -> None:
        self.dead = True
        if self._transport is not None:
            self._transport.close()


async def connect(target: Target) -> _Connection:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(lambda: _Connection(target.first_marker), target.host, target.port)
    return protocol


REQUEST_TIMEOUT = 30.0
"""Seconds an answer may take before it counts as an error (and its connection is dropped)."""


async def one(connection: _Connection, target: Target, raw: bytes) -> Sample:
    start = time.perf_counter()
    try:
        await asyncio.wait_for(connection.exchange(raw), REQUEST_TIMEOUT)
    except (ConnectionError, TimeoutError):
        connection.close()
        return Sample(start, start, start, time.perf_counter(), False)
    end = time.perf_counter()
    body = b"".join(connection.body)
    ok = connection.status() == 200 and target.last_marker in body and target.terminal_marker in body
    return Sample(start, connection.head or end, connection.first or end, end, ok)


async def run(target: Target, concurrency: int, stream: bool, seconds: float,
              warmup: float) -> tuple[list[Sample], float, int]:  # fmt: skip
    """Keep `concurrency` requests in flight for `warmup + seconds`. Returns the samples
    that ended within the measured window (after the warm-up) and the failed requests
    that ended after its start (a request that hangs counts once it times out, even after
    the window), the window's length, and how many answers were whole in all (warm-up and
    the requests still in flight at the end included: the work the gateway's CPU time was
    spent on)."""
    raw = target.request(stream)
    samples: list[Sample] = []
    completed = 0
    begin = time.perf_counter()
    measure_from, stop_at = begin + warmup, begin + warmup + seconds

    async def worker() -> None:
        nonlocal completed
        connection = await connect(target)
        try:
            while time.perf_counter() < stop_at:
                sample = await one(connection, target, raw)
                completed += sample.ok
                if measure_from <= sample.end <= stop_at or (not sample.ok and sample.end >= measure_from):
                    samples.append(sample)
                if connection.dead:
                    connection = await connect(target)
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, seconds, completed


async def hold_open(target: Target, count: int, timeout: float) -> list[_Connection]:
    """Open `count` streams and wait until each has sent its first token; returns their connections."""
    raw = target.request(True)
    connections = await asyncio.gather(*(connect(target) for _ in range(count)))
    for connection in connections:
        connection.first, connection._tail, connection.body = 0.0, b"", []
        assert connection._transport is not None
        connection._transport.write(raw)
    deadline = time.perf_counter() + timeout
    while sum(1 for c in connections if c.first) < count:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {sum(1 for c in connections if c.first)} of {count} streams started")
        await asyncio.sleep(0.05)
    return list(connections)
