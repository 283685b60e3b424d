"""HTTP/1.1 to engines: the POSTs that generations make, and their streamed answers.

A streamed generation is the server's hot path. Through httpx, the engine's side of it —
request and response objects, httpcore's pool and its locks, h11's pure-Python parsing of
every chunk — was half of the CPU time of a streamed response (bench/profile_gateway.py).
For `http://` engines, `PlainEngine` does only what a generation needs: a POST with a
JSON body on a kept-alive connection, its answer parsed by httptools (llhttp, in C) as
it arrives, read in pieces of whatever has arrived. `https://` engines go through httpx
(`HttpxEngine`), which brings TLS and the environment's proxy settings.

Both raise httpx's exceptions (`httpx.ConnectError`, `httpx.ReadTimeout`,
`httpx.RemoteProtocolError`…), which the backends already handle.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools
import httpx

from ..operations import tracing
from ..tls import client_context

KEEPALIVE_EXPIRY = 4.0
"""Seconds an idle connection to an engine is kept: less than the 5 s after which uvicorn
(vLLM, SGLang) and cpp-httplib (llama.cpp) close one, so that a request is not sent on a
connection the engine is closing."""

MAX_IDLE = 100
"""Idle connections kept per engine; more are closed when they are given back."""

READ_AHEAD = 256 * 1024
"""Bytes received but not yet read at which the socket stops being read (back-pressure on
an engine that writes faster than the answer is consumed)."""


class Answer(Protocol):
    """An engine's answer whose body is read as it arrives."""

    status: int
    content_type: str

    def pieces(self) -> AsyncIterator[bytes]:
        """The body in pieces: each is everything that had arrived when it was taken."""
        ...

    async def read(self) -> bytes: ...


class Engine(Protocol):
    def post(self, path: str, body: bytes) -> AbstractAsyncContextManager[Answer]:
        """The engine's answer to a POST of a JSON body, once its head has arrived."""
        ...

    async def aclose(self) -> None: ...


def engine_http(base_url: str, headers: Mapping[str, str], timeout: float, connect_timeout: float) -> Engine:
    """The client for one engine's generations: our own on plain HTTP, httpx's for the rest."""
    if urlsplit(base_url).scheme == "http":
        return PlainEngine(base_url, headers, timeout, connect_timeout)
    return HttpxEngine(base_url, headers, timeout, connect_timeout)


# --- plain HTTP ----------------------------------------------------------------------------


class _Exchange:
    """One request's answer as the connection receives it."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_connection",
        "_error",
        "_head",
        "_length_known",
        "_loop",
        "_timeout",
        "_timer",
        "_waiter",
        "_waiting_since",
        "complete",
        "content_type",
        "received",
        "status",
    )  # fmt: skip

    def __init__(self, connection: _Connection, timeout: float) -> None:
        self._connection = connection
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0
        self.status = 0
        self.content_type = ""
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._head = False
        self._length_known = False
        self.complete = False
        self.received = False
        """Whether any byte of the answer arrived (if none did, the request can be sent again)."""
        self._error: httpx.HTTPError | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- the connection's side --

    def headers_done(self, status: int, content_type: str, length_known: bool) -> None:
        self.status, self.content_type, self._head, self._length_known = status, content_type, True, length_known
        self._wake()

    def body(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > READ_AHEAD:
            self._connection.pause_reading()
        self._wake()

    def ended(self) -> None:
        self.complete = True
        self._wake()

    def failed(self, error: httpx.HTTPError) -> None:
        if self._error is None and not self.complete:
            self._error = error
        self._wake()

    def connection_lost(self) -> None:
        """The engine closed the connection: the end of a body without a declared length, else an error."""
        if self._head and not self._length_known and not self.complete:
            self.ended()
        elif not self.complete:
            self.failed(httpx.RemoteProtocolError("the engine closed the connection before its answer was complete"))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the reader's side --

    async def _wait(self) -> None:
        loop = self._loop
        self._waiter = waiter = loop.create_future()
        self._waiting_since = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._waiting_since + self._timeout, self._watch)
        try:
            await waiter
        finally:
            self._waiter = None

    def _watch(self) -> None:
        """The read timeout: one timer for the exchange, moved on while the answer keeps
        arriving, rather than one set and cancelled for each piece."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._timer = None  # the next wait sets one
            return
        due = self._waiting_since + self._timeout
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._watch)
            return
        self._timer = None
        waiter.set_exception(httpx.ReadTimeout(f"the engine sent nothing for {self._timeout:g} s"))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def head(self) -> None:
        while not self._head:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def pieces(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunks = self._chunks
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                self._connection.resume_reading()
                yield data
            elif self.complete:
                return
            elif self._error is not None:
                raise self._error
            else:
                await self._wait()

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.pieces()])


class _Connection(asyncio.Protocol):
    """One kept-alive connection to an engine; it carries one exchange at a time."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.exchange: _Exchange | None = None
        self.closed = False
        self.idle_since = 0.0
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self._content_type = b""
        self._length_known = False
        self._receiving: _Exchange | None = None
        """The exchange the answer being parsed belongs to (None for an answer nobody asked for)."""

    # -- asyncio --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: the connection cannot be trusted again
            self.close()
            return
        exchange.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            exchange.failed(httpx.RemoteProtocolError(f"the engine's answer is not valid HTTP: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        self._lost()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()

    def _lost(self) -> None:
        self.closed = True
        if self.exchange is not None:
            self.exchange.connection_lost()
        writable = self._writable
        if writable is not None and not writable.done():
            writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable = self._writable
        if writable is not None and not writable.done():
            writable.set_result(None)
        self._writable = None

    # -- httptools --

    def on_message_begin(self) -> None:
        self._content_type = b""
        self._length_known = False
        exchange = self.exchange
        if exchange is not None and exchange.status == 0:
            self._receiving = exchange
        else:  # a second answer to one request: the connection cannot be trusted again
            self._receiving = None
            self.closed = True

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-type":
            self._content_type = value
        elif lowered in (b"content-length", b"transfer-encoding"):
            self._length_known = True

    def on_headers_complete(self) -> None:
        if self._receiving is not None:
            status = self._parser.get_status_code()
            self._receiving.headers_done(status, self._content_type.decode("latin-1"), self._length_known)

    def on_body(self, body: bytes) -> None:
        if self._receiving is not None:
            self._receiving.body(body)

    def on_message_complete(self) -> None:
        if not self._parser.should_keep_alive():
            self.closed = True  # closed when the exchange ends
        if self._receiving is not None:
            self._receiving.ended()

    # -- the pool's side --

    def pause_reading(self) -> None:
        if not self._paused:
            self._paused = True
            self.transport.pause_reading()  # (a closing transport ignores it)

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()

    async def send(self, request: bytes, timeout: float) -> None:
        if self.closed or self.transport.is_closing():
            raise httpx.WriteError("the connection is closed")
        self.transport.write(request)
        writable = self._writable
        if writable is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(writable)
            except TimeoutError:
                raise httpx.WriteTimeout(f"the engine took none of the request for {timeout:g} s") from None

    def close(self) -> None:
        self.closed = True
        self.transport.close()


class PlainEngine:
    """An engine on plain HTTP: POSTs on a pool of kept-alive connections.

    A connection goes back to the pool when its answer was read to the end and the engine
    keeps it alive; an answer left early closes it. Idle connections expire after
    `KEEPALIVE_EXPIRY` seconds, and the engine closing one is noticed by its socket (it is
    always read), so the pool never polls. A request whose connection breaks before any
    byte of an answer — as when the engine closes a kept-alive connection just as it is
    reused: then it never read the request — is sent once more.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float, connect_timeout: float) -> None:
        url = urlsplit(base_url)
        if url.hostname is None:
            raise ValueError(f"no host in {base_url!r}")
        self._host = url.hostname
        self._port = url.port or 80
        self._prefix = url.path.rstrip("/")
        authority = url.netloc.rpartition("@")[2]
        lines = [f"Host: {authority}", "Content-Type: application/json", "Accept: text/event-stream, application/json",
                 *(f"{name}: {value}" for name, value in headers.items())]  # fmt: skip
        self._headers = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    @asynccontextmanager
    async def post(self, path: str, body: bytes) -> AsyncIterator[_Exchange]:
        headers = self._headers
        if tracing.active is not None:  # the engine call's span, for the engine's own spans
            headers += "".join(f"{name}: {value}\r\n" for name, value in tracing.engine_headers().items()).encode()
        request = b"POST %s%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            self._prefix.encode(), path.encode(), headers, len(body), body
        )
        for attempt in range(2):
            connection = await self._connection()
            exchange = connection.exchange = _Exchange(connection, self._timeout)
            try:
                await connection.send(request, self._timeout)
                await exchange.head()
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                self._end(connection)
                if attempt or exchange.received:
                    raise
                continue  # the engine closed the connection without answering (as it was reused)
            except BaseException:
                self._end(connection)
                raise
            break
        try:
            yield exchange
        finally:
            self._end(connection)

    async def _connection(self) -> _Connection:
        """An idle connection that is still good, else a new one."""
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < KEEPALIVE_EXPIRY:
                return connection
            connection.close()
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, connection = await loop.create_connection(_Connection, self._host, self._port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {self._host}:{self._port} within "
                                       f"{self._connect_timeout:g} s") from None  # fmt: skip
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {self._host}:{self._port}: {exc}") from exc
        self._open.add(connection)
        return connection

    def _end(self, connection: _Connection) -> None:
        """The exchange is over: the connection goes back to the pool, or is closed."""
        exchange, connection.exchange = connection.exchange, None
        if exchange is not None:
            exchange.close()
        if connection.closed or exchange is None or not exchange.complete or len(self._idle) >= MAX_IDLE:
            connection.close()
            self._open.discard(connection)
            return
        connection.resume_reading()
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    async def aclose(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()


# --- anything else, through httpx ------------------------------------------------------------


class _HttpxAnswer:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.content_type = response.headers.get("content-type", "")

    def pieces(self) -> AsyncIterator[bytes]:
        return self._response.aiter_bytes()

    async def read(self) -> bytes:
        return await self._response.aread()


class HttpxEngine:
    """An engine over TLS (or anything but plain HTTP), through httpx; a request whose
    connection breaks before any answer is sent once more, as on plain HTTP."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float, connect_timeout: float) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=MAX_IDLE,
                              keepalive_expiry=KEEPALIVE_EXPIRY)  # fmt: skip
        self._client = httpx.AsyncClient(base_url=base_url, headers={**headers, "Content-Type": "application/json"},
                                         timeout=httpx.Timeout(timeout, connect=connect_timeout), limits=limits,
                                         verify=client_context())  # fmt: skip

    @asynccontextmanager
    async def post(self, path: str, body: bytes) -> AsyncIterator[_HttpxAnswer]:
        for attempt in range(2):
            request = self._client.build_request("POST", path, content=body, headers=tracing.engine_headers())
            try:
                response = await self._client.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                if attempt:
                    raise
                continue
            break
        try:
            yield _HttpxAnswer(response)
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()
