"""The plain-HTTP transport to engines against real sockets: bodies larger than the socket
buffers, answers in pieces, timeouts and refusals as httpx's errors, engines that close idle
connections."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from responsekit.backends.plain_http import PlainHTTPTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def engine(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


def client(base_url: str, timeout: float = 5.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_keepalive_connections=4, keepalive_expiry=30)
    return httpx.AsyncClient(base_url=base_url, transport=PlainHTTPTransport(limits), timeout=timeout)


async def read_request(reader: asyncio.StreamReader, slowly: bool = False) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
    body = bytearray()
    while len(body) < length:
        body += await reader.read(65536)
        if slowly:
            await asyncio.sleep(0)  # the client's writes outrun these reads: its transport pauses
    return bytes(body)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: bytes) -> None:
    """Read the request, then write `response` (status line, headers and body as given)."""
    await read_request(reader)
    writer.write(response)
    await writer.drain()


def test_a_large_body_goes_out_whole_and_a_streamed_answer_comes_back_in_order() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader, slowly=True)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for n in range(50):
            piece = f"{len(body)}:{n};".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        payload = bytes(range(256)) * (40 * 1024)  # 10 MiB
        async with engine(handler) as url, client(url) as http:
            async with http.stream("POST", "/", content=payload) as answer:
                text = b"".join([part async for part in answer.aiter_raw()]).decode()
        assert text == "".join(f"{len(payload)}:{n};" for n in range(50))

    asyncio.run(main())


def test_an_engine_faster_than_the_reader_is_held_back() -> None:
    """Received bytes wait in memory only up to a bound; then the socket is not read, and the
    engine's writes wait (its drain blocks) until the answer is consumed."""
    size, piece = 64 * 2**20, 2**20
    written = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        for _ in range(size // piece):
            writer.write(b"x" * piece)
            await writer.drain()
            written += piece
        writer.close()

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            async with http.stream("POST", "/", content=b"x") as answer:
                await asyncio.sleep(0.5)  # the reader dawdles
                assert written < size // 4  # without back-pressure, all 64 MiB would be in our buffer
                received = sum([len(part) async for part in answer.aiter_raw()])
        assert received == size and written == size

    asyncio.run(main())


def test_silence_past_the_timeout_is_httpx_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await asyncio.sleep(5)

    async def main() -> None:
        async with engine(handler) as url, client(url, timeout=0.3) as http:
            answer = await http.send(http.build_request("POST", "/", content=b"x"), stream=True)
            with pytest.raises(httpx.ReadTimeout):
                await answer.aread()
            await answer.aclose()

    asyncio.run(main())


def test_a_refused_connection_is_httpx_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused

        async def main() -> None:
            async with client(f"http://127.0.0.1:{port}") as http:
                with pytest.raises(httpx.ConnectError):
                    await http.get("/")

        asyncio.run(main())


def test_a_connection_the_engine_closed_while_idle_is_not_reused() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        writer.close()  # without `connection: close`: the client learns it from the socket

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            for _ in range(3):
                answer = await http.post("/", content=b"x")
                assert answer.text == "ok"
                await asyncio.sleep(0.05)  # the close reaches the idle connection
        assert connections == 3

    asyncio.run(main())


def test_the_engine_hanging_up_mid_answer_is_an_httpx_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\ncut short")
        writer.close()

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await http.post("/", content=b"x")

    asyncio.run(main())


def test_it_runs_on_uvloop_as_the_server_does() -> None:
    import uvloop

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            assert (await http.post("/", content=b"x")).text == "ok"

    uvloop.run(main())
