"""An httpx transport for engines on plain HTTP, on asyncio's own sockets.

httpx's default network layer reads through anyio: each read of a streamed answer opens a
cancel scope for its timeout and an exception-mapping context manager, which together cost
about a seventh of the gateway's CPU on a streamed request (bench/profile_gateway.py). This
transport keeps httpcore's connection pool and HTTP/1.1 machinery and gives it a network
backend on an `asyncio.Protocol`: a read returns what has arrived, and only a read that has
to wait sets a timer. TLS engines keep httpx's own transport.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import httpcore
import httpx

_ERRORS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.TimeoutException: httpx.TimeoutException,
}
"""httpcore's errors as httpx's, which callers catch (most specific first)."""
_CORE_ERRORS = tuple(_ERRORS)


def _as_httpx(exc: Exception) -> httpx.HTTPError:
    for kind, mapped in _ERRORS.items():
        if isinstance(exc, kind):
            return mapped(str(exc))
    raise AssertionError(f"unmapped {exc!r}")  # every class of _CORE_ERRORS is a key


class PlainHTTPTransport(httpx.AsyncBaseTransport):
    """httpcore's connection pool over `SocketBackend`, for `http://` engines."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=SocketBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            answer = await self._pool.handle_async_request(core)
        except _CORE_ERRORS as exc:
            raise _as_httpx(exc) from exc
        return httpx.Response(
            answer.status, headers=answer.headers, stream=_Body(answer.stream), extensions=answer.extensions
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except _CORE_ERRORS as exc:
            raise _as_httpx(exc) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


class SocketBackend(httpcore.AsyncNetworkBackend):
    """TCP connections as asyncio transports (no TLS, no Unix sockets: httpx's transport serves those)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Receiver, host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection to {host}:{port} within {timeout} s") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        socket = transport.get_extra_info("socket")
        for option in socket_options or ():
            socket.setsockopt(*option)
        return SocketStream(protocol)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("Unix sockets go through httpx's own transport")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


READ_AHEAD = 256 * 1024
"""Bytes received but not yet read at which the socket stops being read (back-pressure on
an engine that writes faster than the answer is consumed)."""


class _Receiver(asyncio.Protocol):
    """What the socket delivered, waiting to be read; and whether writing must pause."""

    transport: asyncio.Transport
    """Set once connected, before any other callback."""

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.reading_paused = False
        self.closed = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.writable: asyncio.Future[None] | None = None  # set while the transport's buffer is full

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.buffered += len(data)
        if self.buffered > READ_AHEAD and not self.reading_paused:
            self.transport.pause_reading()  # (a closing transport ignores it)
            self.reading_paused = True
        self._wake()

    def take(self, max_bytes: int) -> bytes:
        """The next received bytes, at most `max_bytes` (a chunk must be waiting)."""
        data = self.chunks.popleft()
        if len(data) > max_bytes:
            self.chunks.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        self.buffered -= len(data)
        if self.reading_paused and self.buffered <= READ_AHEAD // 2:
            if not self.transport.is_closing():
                self.transport.resume_reading()
            self.reading_paused = False
        return data

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)
        self.writable = None

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class SocketStream(httpcore.AsyncNetworkStream):
    def __init__(self, receiver: _Receiver) -> None:
        self._receiver = receiver
        self._transport = receiver.transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        receiver = self._receiver
        if not receiver.chunks and not receiver.closed:
            loop = asyncio.get_running_loop()
            receiver.waiter = waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _time_out, waiter, timeout)
            try:
                await waiter
            finally:
                receiver.waiter = None
                if timer is not None:
                    timer.cancel()
        if receiver.chunks:
            return receiver.take(max_bytes)
        if receiver.error is not None:
            raise httpcore.ReadError(str(receiver.error))
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        writable = self._receiver.writable
        if writable is not None:
            try:
                await asyncio.wait_for(asyncio.shield(writable), timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout(f"the engine took nothing for {timeout} s") from None

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS goes through httpx's own transport")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore: an idle connection that is readable was closed by the engine
            return bool(self._receiver.chunks) or self._receiver.closed
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


def _time_out(waiter: asyncio.Future[None], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(httpcore.ReadTimeout(f"nothing received for {timeout} s"))
