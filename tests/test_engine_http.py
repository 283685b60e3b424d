"""The engines' HTTP client against real sockets: bodies larger than the socket buffers,
answers in pieces, back-pressure, timeouts and refusals as httpx's errors, kept-alive
connections reused only when they can be, engines that close idle connections."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

import httpx
import pytest

from responsekit.backends.engine_http import HttpxEngine, PlainEngine, engine_http

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def engine(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def client(base_url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> AsyncIterator[PlainEngine]:
    http = PlainEngine(base_url, headers or {}, timeout, connect_timeout=2.0)
    try:
        yield http
    finally:
        await http.aclose()


async def read_request(reader: asyncio.StreamReader, slowly: bool = False) -> tuple[bytes, bytes]:
    """The request's head and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
    body = bytearray()
    while len(body) < length:
        body += await reader.read(65536)
        if slowly:
            await asyncio.sleep(0)  # the client's writes outrun these reads: its transport pauses
    return head, bytes(body)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: bytes) -> None:
    """Read the request, then write `response` (status line, headers and body as given)."""
    await read_request(reader)
    writer.write(response)
    await writer.drain()


async def post(http: PlainEngine, body: bytes = b"{}") -> tuple[int, str, bytes]:
    async with http.post("/chat/completions", body) as reply:
        return reply.status, reply.content_type, await reply.read()


def test_plain_http_engines_get_this_client_and_others_httpx() -> None:
    assert isinstance(engine_http("http://127.0.0.1:1/v1", {}, 1, 1), PlainEngine)
    assert isinstance(engine_http("https://api.openai.com/v1", {}, 1, 1), HttpxEngine)


def test_the_request_names_the_path_host_headers_and_body() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head, body = await read_request(reader)
        seen.extend([head, body])
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()

    async def main() -> None:
        async with engine(handler) as url, client(url, headers={"Authorization": "Bearer k"}) as http:
            assert await post(http, b'{"a":1}') == (200, "application/json", b"{}")

    asyncio.run(main())
    head, body = seen
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert "Authorization: Bearer k" in lines and "Content-Type: application/json" in lines
    assert any(line.startswith("Host: 127.0.0.1:") for line in lines)
    assert body == b'{"a":1}'


def test_a_large_body_goes_out_whole_and_a_streamed_answer_comes_back_in_order() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, body = await read_request(reader, slowly=True)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
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
            async with http.post("/", payload) as reply:
                assert reply.content_type == "text/event-stream"
                text = b"".join([piece async for piece in reply.pieces()]).decode()
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
            async with http.post("/", b"x") as reply:
                await asyncio.sleep(0.5)  # the reader dawdles
                assert written < size // 4  # without back-pressure, all 64 MiB would be in our buffer
                received = sum([len(part) async for part in reply.pieces()])
        assert received == size and written == size

    asyncio.run(main())


def test_silence_past_the_timeout_is_httpx_read_timeout() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await asyncio.sleep(5)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def main() -> None:
        async with engine(handler) as url, client(url, timeout=0.3) as http:
            async with http.post("/", b"x") as reply:
                with pytest.raises(httpx.ReadTimeout):
                    await reply.read()
        async with engine(silent) as url, client(url, timeout=0.3) as http:
            with pytest.raises(httpx.ReadTimeout):
                await post(http)

    asyncio.run(main())


def test_a_refused_connection_is_httpx_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connections are refused

        async def main() -> None:
            async with client(f"http://127.0.0.1:{port}") as http:
                with pytest.raises(httpx.ConnectError):
                    await post(http)

        asyncio.run(main())


class Counted:
    """A test engine's handler that counts the connections it is given."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self.handler(reader, writer)


def test_answers_read_to_the_end_reuse_their_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(3):
            await answer(reader, writer, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        await reader.read()

    served = Counted(handler)

    async def main() -> None:
        async with engine(served) as url, client(url) as http:
            for _ in range(3):
                assert await post(http) == (200, "", b"ok")

    asyncio.run(main())
    assert served.connections == 1


def test_an_answer_left_early_or_ended_by_connection_close_does_not_reuse_its_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabc")
        if early.connections == 2:
            writer.write(b"def")
            await writer.drain()
        with suppress(ConnectionError):
            await reader.read()

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        await asyncio.sleep(0.5)  # the socket stays open: only the header says it is done

    early, closed = Counted(handler), Counted(closing)

    async def main() -> None:
        async with engine(early) as url, client(url) as http:
            async with http.post("/", b"x") as reply:
                assert await anext(reply.pieces()) == b"abc"  # and the rest never read
            assert await post(http) == (200, "", b"abcdef")
        async with engine(closed) as url, client(url) as http:
            assert await post(http) == (200, "", b"ok")
            assert await post(http) == (200, "", b"ok")

    asyncio.run(main())
    assert early.connections + closed.connections == 4
    assert early.connections == closed.connections == 2


def test_a_body_ended_by_the_engine_closing_the_connection_is_whole() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\ndata: 2\n\n")
        writer.close()

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            assert await post(http) == (200, "text/event-stream", b"data: 1\n\ndata: 2\n\n")

    asyncio.run(main())


def test_a_connection_the_engine_closed_while_idle_is_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        writer.close()  # without `connection: close`: the client learns it from the socket

    served = Counted(handler)

    async def main() -> None:
        async with engine(served) as url, client(url) as http:
            for _ in range(3):
                assert await post(http) == (200, "", b"ok")
                await asyncio.sleep(0.05)  # the close reaches the idle connection
        assert served.connections == 3

    asyncio.run(main())


def test_a_connection_closed_unanswered_is_tried_once_more_then_fails() -> None:
    requests = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        requests += 1
        await read_request(reader)
        if requests % 2:  # the first of each pair is dropped without a word
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()

    async def always_closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        requests += 1
        await read_request(reader)
        writer.close()

    async def main() -> None:
        nonlocal requests
        async with engine(handler) as url, client(url) as http:
            assert await post(http) == (200, "", b"ok")
        assert requests == 2
        requests = 0
        async with engine(always_closing) as url, client(url) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await post(http)
        assert requests == 2

    asyncio.run(main())


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\ncut short",  # the engine hangs up mid-answer
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",  # not HTTP at all
])  # fmt: skip
def test_an_answer_cut_short_or_not_http_is_a_protocol_error(reply: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, reply)
        writer.close()

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            with pytest.raises(httpx.RemoteProtocolError):
                await post(http)

    asyncio.run(main())


def test_it_runs_on_uvloop_as_the_server_does() -> None:
    import uvloop

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer(reader, writer, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    async def main() -> None:
        async with engine(handler) as url, client(url) as http:
            assert await post(http) == (200, "", b"ok")

    uvloop.run(main())


def test_an_answer_that_keeps_arriving_never_times_out_however_long_it_takes() -> None:
    """The read timeout is the longest silence, not the answer's whole time."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(12):
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def main() -> None:
        async with engine(handler) as url, client(url, timeout=0.35) as http:
            assert await post(http) == (200, "", b"x" * 12)  # 1.2 s in all, never 0.35 s silent

    asyncio.run(main())


def test_the_httpx_client_for_other_engines_answers_alike() -> None:
    """`HttpxEngine` (TLS engines' client) on a plain socket: the same answer, pieces and errors."""
    requests = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            requests += 1
            if requests == 1:  # dropped unanswered: sent once more
                writer.close()
                return
            if requests == 3:
                writer.write(b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 4\r\n\r\nslow")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                             b"\r\n6\r\ndata: \r\n2\r\nok\r\n0\r\n\r\n")  # fmt: skip
            await writer.drain()

    async def main() -> None:
        async with engine(handler) as url:
            http = HttpxEngine(url, {"Authorization": "Bearer k"}, 5, 2)
            try:
                async with http.post("/chat/completions", b"{}") as reply:
                    assert (reply.status, reply.content_type) == (200, "text/event-stream")
                    assert b"".join([piece async for piece in reply.pieces()]) == b"data: ok"
                async with http.post("/chat/completions", b"{}") as reply:
                    assert (reply.status, await reply.read()) == (429, b"slow")
            finally:
                await http.aclose()

    asyncio.run(main())
    assert requests == 3
