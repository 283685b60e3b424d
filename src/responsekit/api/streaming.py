"""Answers that take a generation's time: SSE bodies written as the engine produces them,
and non-streaming work cancelled when its client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

T = TypeVar("T")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event_stream(items: AsyncIterator[Any], *, encode: Callable[[Any], bytes] | None = None, end: bytes = b"",
                 heartbeat: bytes | None = None, headers: dict[str, str] | None = None,
                 start_at_once: bool = False) -> StreamingResponse:  # fmt: skip
    return EventStreamResponse(items, encode=encode, end=end, heartbeat=heartbeat, media_type="text/event-stream",
                               headers={**SSE_HEADERS, **(headers or {})}, start_at_once=start_at_once)


COALESCE_LIMIT = 1 << 16
"""Bytes of frames a stream may produce ahead of a client that reads slowly."""
HEARTBEAT_SECONDS = 10.0
"""How long a stream with a heartbeat stays silent before one is sent."""


class EventStreamResponse(StreamingResponse):
    """An SSE body whose frames leave in as few writes as they can without waiting.

    A producer task runs the generation until it waits for the engine (or `limit` bytes
    wait unsent), so the frames made from one read of the engine's stream leave in one
    system call rather than one each, and the last batch carries the end of the body.
    No frame is ever held back: a batch goes out as soon as the producer has nothing more
    at hand. When the client leaves, the producer is cancelled, and with it the engine's
    request. (Each write to a client that is waiting wakes it: on a virtual machine the
    wake-up costs more than the write.)

    Starlette's own streaming response runs the body and a disconnect listener in an anyio
    task group, whose cancel scopes cost about a fifth of a streamed response's CPU time;
    here the listener is a plain task that cancels the producer.

    `items` are frames, or what `encode` makes one frame of (a protocol's event): the producer
    encodes them itself, rather than through one more generator, a hop every event would pay.
    `end` (`data: [DONE]`) follows the last item when the items ran out without failing.

    A `heartbeat` frame (Anthropic's `ping`) is sent whenever the stream has been silent for
    `HEARTBEAT_SECONDS` after it started, between frames; one timer a period, nothing per frame.

    The status and headers go out with the first frames, or at once with `start_at_once`: for a
    protocol whose first frame waits for the model's first token (Gemini's), where a client gives up
    on headers that take longer than a long prompt's prefill (Gemini CLI: 60 s).
    """

    def __init__(self, items: AsyncIterator[Any], *, encode: Callable[[Any], bytes] | None = None, end: bytes = b"",
                 heartbeat: bytes | None = None, start_at_once: bool = False, **options: Any) -> None:  # fmt: skip
        super().__init__(items, **options)
        self._items = items
        self._encode = encode
        self._end = end
        self._heartbeat = heartbeat
        self._start_at_once = start_at_once

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        loop = asyncio.get_running_loop()
        batch: list[bytes] = []
        size = 0
        finished = failed = False
        ready: asyncio.Future[None] | None = None
        """Set while the writer waits for frames (bare futures: an `asyncio.Event` costs a
        future and a loop lookup on every wait, and these wait for every token)."""
        room: asyncio.Future[None] | None = None
        """Set while the producer waits for the writer to take a full batch."""

        async def produce() -> None:
            nonlocal size, finished, failed, room
            encode = self._encode
            try:
                async for item in self._items:
                    frame = item if encode is None else encode(item)
                    batch.append(frame)
                    size += len(frame)
                    _wake(ready)
                    if size >= COALESCE_LIMIT:
                        room = loop.create_future()
                        await room
                if self._end:
                    batch.append(self._end)
            except BaseException:
                failed = True
                raise
            finally:
                finished = True
                _wake(ready)

        producer = asyncio.create_task(produce())
        listener = asyncio.create_task(_disconnected(receive))
        listener.add_done_callback(lambda _: producer.cancel())
        started = False
        sent = False
        """Whether a body went out since the last heartbeat tick."""
        timer: asyncio.TimerHandle | None = None

        def tick() -> None:
            nonlocal sent, timer, size
            if finished:
                return
            if started and not sent and not batch and self._heartbeat is not None:
                batch.append(self._heartbeat)
                size += len(self._heartbeat)
                _wake(ready)
            sent = False
            timer = loop.call_later(HEARTBEAT_SECONDS, tick)

        if self._heartbeat is not None:
            timer = loop.call_later(HEARTBEAT_SECONDS, tick)
        try:
            if self._start_at_once:
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                started = True
            while True:
                if not batch and not finished:
                    ready = loop.create_future()
                    await ready
                    ready = None
                done = finished  # then every frame is in the batch taken now
                body = batch[0] if len(batch) == 1 else b"".join(batch)
                batch.clear()
                size = 0
                _wake(room)
                last = done and not failed
                if body or last:
                    if not started:
                        # Started once the producer waits for the engine: the start (and its
                        # access-log line) costs the client no time the engine was not taking.
                        await send({"type": "http.response.start", "status": self.status_code,
                                    "headers": self.raw_headers})  # fmt: skip
                        started = True
                    await send({"type": "http.response.body", "body": body, "more_body": not last})
                    sent = True
                if done:
                    break
            await asyncio.wait({producer})
            if not (producer.cancelled() and listener.done()):  # unless the client left
                producer.result()  # its exception, if it failed
        finally:
            if timer is not None:
                timer.cancel()
            listener.cancel()
            if not producer.done():
                producer.cancel()
                await asyncio.wait({producer})


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class ClientDisconnected(Exception):
    """The client went away while a non-streaming answer was being generated."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Run `work`, cancelling it (and so the upstream request) if the client disconnects."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task not in done:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        raise ClientDisconnected
    return task.result()


async def _disconnected(receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
