"""Test parts: real servers on loopback, a scripted upstream engine, schema checks."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.responses import Response as HTTPResponse
from starlette.routing import Route

DATA = Path(__file__).parent / "data"
SPEC = json.loads((DATA / "spec_required.json").read_text())


@contextmanager
def serve(app: Any, port: int = 0) -> Iterator[str]:
    """Run an ASGI app with uvicorn on loopback (a free port by default); yields its base URL.

    It may take a while to start: an app with no engine configured assembles and loads the
    embedded Gemma in its lifespan (7 s on a loaded 2-core machine), slower still beside other
    test workers; hence a minute, as for llama-cpp-python's server (tests/llama_server.py).
    """
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True  # not left running behind the next tests
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


PORTS_FROM = 10_000
"""The lowest port `free_port` hands out; the highest is below the kernel's ephemeral range."""
_port_turn = itertools.count(random.randrange(1 << 16))


def _worker_ports() -> range:
    """The loopback ports this test process hands out: its own block, below the kernel's ephemeral
    range, one block per pytest-xdist worker (`gw0`, `gw1`…); all of them without xdist."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default range starts here
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    size = (ephemeral - PORTS_FROM) // max(workers, 1)
    number = int(worker) if worker.isdigit() else 0
    return range(PORTS_FROM + number * size, PORTS_FROM + (number + 1) * size)


def free_port() -> int:
    """A loopback port nothing listens on, for a server started later (a subprocess, HAProxy,
    PostgreSQL) or one a test needs to stay closed.

    Not the kernel's choice (binding port 0): the kernel gives every process, and every outgoing
    connection, ports from its ephemeral range, so a port found that way and let go may be taken
    by another test worker's server or connection before it is used. These come from this
    worker's own block below that range (`_worker_ports`), in turn from a random start (another
    test run beside this one starts elsewhere), skipping any that cannot be bound now.
    """
    ports = _worker_ports()
    if len(ports) < 100:  # an unusual ephemeral range, or very many workers: the kernel's choice
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    for _ in range(len(ports)):
        port = ports[next(_port_turn) % len(ports)]
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError(f"no free loopback port in {ports}")


def start_cli(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """`responsekit serve` as its own process on a free port; returns it and its base URL once it answers.

    Its output goes to a file (a pipe nobody reads would block the server once full);
    `output(process)` reads it.
    """
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", prefix="responsekit-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [sys.executable, "-m", "responsekit", "serve", "--port", str(port), *args],
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    process.log_path = log.name  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{url}/health", timeout=1)
            return process, url
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(output(process)) from None
            time.sleep(0.1)


def output(process: subprocess.Popen[str]) -> str:
    """What a process started by `start_cli` has printed so far."""
    return Path(process.log_path).read_text()  # type: ignore[attr-defined]


def wait_for(condition: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Poll until `condition()` is truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
    return value


def exchange(name: str) -> dict[str, Any]:
    """A recorded upstream exchange (the `--record` format) from tests/data/exchanges."""
    return json.loads((DATA / "exchanges" / f"{name}.json").read_text())


def text_exchange(text: str, *, reasoning: str = "", pieces: int = 3) -> dict[str, Any]:
    """A simple streamed chat answer in llama.cpp's chunk shape."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}  # fmt: skip

    chunks: list[Any] = [chunk({"role": "assistant", "content": None})]
    chunks += [chunk({"reasoning_content": reasoning[i : i + pieces]}) for i in range(0, len(reasoning), pieces)]
    chunks += [chunk({"content": text[i : i + pieces]}) for i in range(0, len(text), pieces)]
    chunks.append(chunk({}, "stop", usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}))
    chunks.append("[DONE]")
    return {"status": 200, "chunks": [{"t": 0, "data": data} for data in chunks]}


def tool_call_exchange(name: str, arguments: dict[str, Any], *, reasoning: str = "", call_id: str = "call_1") -> dict[str, Any]:
    """A streamed answer (llama.cpp's chunk shape) that reasons, then calls one tool."""
    exchange = text_exchange("", reasoning=reasoning)
    chunks = exchange["chunks"][:-2]
    text = json.dumps(arguments)
    delta = {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}
    chunks.append({"t": 0, "data": {"choices": [{"index": 0, "delta": delta}]}})
    for start in range(0, len(text), 7):
        piece = {"tool_calls": [{"index": 0, "function": {"arguments": text[start : start + 7]}}]}
        chunks.append({"t": 0, "data": {"choices": [{"index": 0, "delta": piece}]}})
    usage = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
    chunks.append({"t": 0, "data": {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": usage}})
    chunks.append({"t": 0, "data": "[DONE]"})
    return {"status": 200, "chunks": chunks}


def tool_loop(arguments: dict[str, dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An engine that calls a tool first and answers once it sees the tool's output.

    `arguments` maps the tool names it knows to the arguments it calls them with; it
    calls the first of them the request offers.
    """

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text_exchange(f"The tool said: {str(last['content'])[:300]}", reasoning="The tool answered.")
        offered = [tool["function"]["name"] for tool in body.get("tools") or ()]
        name = next((name for name in arguments if name in offered), None)
        if name is None:
            return text_exchange("No tool I know is offered.")
        return tool_call_exchange(name, arguments[name], reasoning=f"I should call {name}.",
                                  call_id=f"call_{len(body['messages'])}")  # fmt: skip

    return respond


def slow_exchange(pieces: int, seconds_each: float, letter: str = "x", reasoning: str = "") -> dict[str, Any]:
    """A text answer of `pieces` one-letter deltas (after the `reasoning`, one letter each), `seconds_each`
    apart (with `time_scale = 1`)."""
    exchange = text_exchange(letter * pieces, pieces=1, reasoning=reasoning)
    for position, chunk in enumerate(exchange["chunks"]):
        chunk["t"] = position * seconds_each
    return exchange


class ScriptedUpstream:
    """A real OpenAI-compatible engine on loopback that replays recorded exchanges.

    Exchanges are served in the order they were pushed; `responder` answers when the
    queue is empty. Every request body is kept in `requests`; `time_scale` scales the
    recorded delays (0 replays at once). Faults a script can ask for: `"end": "drop"`
    (the connection breaks after the chunks), `"trickle": SECONDS` (the body is written
    one byte at a time), any `status` with its `error_body`, and any text as a chunk's
    `data` (sent as is, so also malformed SSE). A chunk `{"gate": threading.Event()}` holds
    the answer there until the test sets it. With `refuses_images`, a request holding an
    image part is answered 400 as vLLM answers for a text-only model; `files` are served at
    `/files/NAME` (what a `file_url` or an image URL may point at; `redirects` maps a NAME to
    the URL it redirects to; `file_delay` seconds pass before any answer), and `file_hits`
    counts their fetches.
    What the engine tells of its models' modalities: `props` (llama.cpp's `/props`),
    `capabilities` (Ollama's `/api/show`), `model_types` (LM Studio's `/api/v0/models/NAME`).
    """

    def __init__(self, models: tuple[str, ...] = ("test-model",), owned_by: str = "llamacpp") -> None:
        self.models = list(models)
        self.owned_by = owned_by
        self.queue: deque[dict[str, Any]] = deque()
        self.responder: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        """The headers of each chat request, in order."""
        self.time_scale = 0.0
        self.cancelled = 0
        self.finished = 0
        self.refuses_images = False
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}
        self.file_delay = 0.0
        self.file_hits = 0
        self.props: dict[str, Any] | None = None
        self.capabilities: dict[str, list[str]] = {}
        self.model_types: dict[str, str] = {}
        self.app = Starlette(routes=[
            Route("/v1/models", self._models),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/tokenize", self._tokenize, methods=["POST"]),
            Route("/apply-template", self._apply_template, methods=["POST"]),
            Route("/files/{name}", self._file),
            Route("/props", self._props),
            Route("/api/show", self._show, methods=["POST"]),
            Route("/api/v0/models/{name}", self._model_type),
        ])  # fmt: skip

    def push(self, *exchanges: dict[str, Any]) -> None:
        self.queue.extend(exchanges)

    async def _models(self, request: Request) -> JSONResponse:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": self.owned_by} for name in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def _tokenize(self, request: Request) -> JSONResponse:
        """vLLM's shape when given messages (one token per word here), llama.cpp's when given content."""
        body = await request.json()
        if "messages" in body:
            words = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
            return JSONResponse({"count": words + 3 * len(body["messages"]), "max_model_len": 4096, "tokens": []})
        return JSONResponse({"tokens": list(range(len(body["content"].split())))})

    async def _apply_template(self, request: Request) -> JSONResponse:
        body = await request.json()
        prompt = " ".join(f"<|{m['role']}|> {m.get('content') or ''}" for m in body["messages"])
        return JSONResponse({"prompt": prompt + " <|assistant|>"})

    async def _props(self, request: Request) -> HTTPResponse:
        return HTTPResponse(status_code=404) if self.props is None else JSONResponse(self.props)

    async def _show(self, request: Request) -> HTTPResponse:
        found = self.capabilities.get((await request.json()).get("model"))
        return HTTPResponse(status_code=404) if found is None else JSONResponse({"capabilities": found})

    async def _model_type(self, request: Request) -> HTTPResponse:
        found = self.model_types.get(request.path_params["name"])
        return HTTPResponse(status_code=404) if found is None else JSONResponse({"type": found})

    async def _file(self, request: Request) -> HTTPResponse:
        self.file_hits += 1
        await asyncio.sleep(self.file_delay)
        name = request.path_params["name"]
        if name in self.redirects:
            return HTTPResponse(status_code=302, headers={"location": self.redirects[name]})
        data = self.files.get(name)
        media = "image/png" if name.endswith(".png") else "application/pdf"
        return HTTPResponse(status_code=404) if data is None else HTTPResponse(data, media_type=media)

    async def _chat(self, request: Request) -> HTTPResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.refuses_images and image_parts(body):
            refusal = {"object": "error", "message": f"{body['model']} is not a multimodal model",
                       "type": "BadRequestError", "param": None, "code": 400}  # fmt: skip
            return JSONResponse(refusal, status_code=400)
        script = self.queue.popleft() if self.queue else self.responder(body) if self.responder else None
        if script is None:
            return JSONResponse({"error": {"message": "the test script is exhausted"}}, status_code=500)
        status = script.get("status") or 200
        if status >= 400:
            return HTTPResponse(script.get("error_body") or "", status_code=status, media_type="application/json")
        return StreamingResponse(self._frames(script), media_type="text/event-stream")

    async def _frames(self, script: dict[str, Any]) -> Any:
        previous = 0.0
        try:
            for chunk in script["chunks"]:
                if (gate := chunk.get("gate")) is not None:
                    await asyncio.to_thread(gate.wait)
                    continue
                at = float(chunk.get("t", previous))
                if (delay := (at - previous) * self.time_scale) > 0:
                    await asyncio.sleep(delay)
                previous = at
                data = chunk["data"]
                frame = f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"
                if script.get("trickle") is None:
                    yield frame
                    continue
                for byte in frame.encode():  # one byte per write, `trickle` seconds apart
                    yield bytes([byte])
                    await asyncio.sleep(script["trickle"])
            if script.get("end") == "drop":
                raise ConnectionAbortedError("scripted drop")
            self.finished += 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


def image_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The image parts of a chat request's messages."""
    return [part for message in body["messages"] if isinstance(message.get("content"), list)
            for part in message["content"] if part.get("type") == "image_url"]  # fmt: skip


# --- schema checks ---------------------------------------------------------------------

_EVENT = TypeAdapter(ResponseStreamEvent)
# The SDK's enum of `response.error.code` lacks context_length_exceeded, which OpenAI sends
# and Codex acts on (it starts compaction); every other key is checked strictly.
_CODES_BEYOND_SDK = {"context_length_exceeded"}


def check_response(response: dict[str, Any]) -> Response:
    """Strict SDK validation plus the required keys of the wire checklist."""
    missing = set(SPEC["response"]) - set(response)
    assert not missing, f"Response lacks {sorted(missing)}"
    assert isinstance(response["created_at"], int)
    if response.get("usage") is not None:
        assert not set(SPEC["usage"]) - set(response["usage"])
    for item in response["output"]:
        check_item(item)
    checked = response
    if (response.get("error") or {}).get("code") in _CODES_BEYOND_SDK:
        checked = {**response, "error": {**response["error"], "code": "server_error"}}
    return Response.model_validate(checked, strict=True)


def check_item(item: dict[str, Any]) -> None:
    missing = set(SPEC["output_items"][item["type"]]) - set(item)
    assert not missing, f"{item['type']} item lacks {sorted(missing)}"


def check_event(event: dict[str, Any]) -> Any:
    missing = set(SPEC["events"][event["type"]]) - set(event)
    assert not missing, f"{event['type']} lacks {sorted(missing)}"
    if "response" in event:
        check_response(event["response"])
    if "item" in event:
        check_item(event["item"])
    return _EVENT.validate_python(_sdk_view(event), strict=True)


def _sdk_view(event: dict[str, Any]) -> dict[str, Any]:
    response = event.get("response")
    if response and (response.get("error") or {}).get("code") in _CODES_BEYOND_SDK:
        return {**event, "response": {**response, "error": {**response["error"], "code": "server_error"}}}
    return event


def check_chat_chunk(chunk: dict[str, Any]) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(chunk, strict=True)


def check_chat_completion(completion: dict[str, Any]) -> ChatCompletion:
    return ChatCompletion.model_validate(completion, strict=True)


def read_sse(lines: Iterator[str]) -> tuple[list[dict[str, Any]], bool]:
    """Parse an SSE body strictly: `event:` equals the JSON type; returns (events, saw [DONE])."""
    events: list[dict[str, Any]] = []
    name: str | None = None
    done = False
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            assert not done, "data after [DONE]"
            if line == "data: [DONE]":
                done = True
                continue
            event = json.loads(line[6:])
            assert name == event["type"], f"event: {name} but type {event['type']}"
            events.append(event)
            name = None
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return events, done


TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def check_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Check a Responses event sequence against §3 of the wire checklist; returns the final Response.

    Every event validates strictly; sequence numbers run 0..n-1; `response.created`
    comes first, one terminal event last; items are added before their content and done
    after it; ids never change; deltas join to the done texts and to the final output, which
    holds every item announced done, whatever the response's status.
    """
    for event in events:
        check_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[0]["response"]["status"] == ("queued" if events[0]["response"]["background"] else "in_progress")
    assert events[1]["type"] == "response.in_progress"
    terminal = [e for e in events if e["type"] in TERMINAL]
    assert len(terminal) == 1 and terminal[0] is events[-1], "exactly one terminal event, at the end"
    response = events[-1]["response"]
    assert {e["response"]["id"] for e in events if "response" in e} == {response["id"]}

    added: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    texts: dict[tuple[Any, ...], list[str]] = {}
    open_parts: set[tuple[Any, ...]] = set()
    for event in events:
        kind = event["type"]
        if kind == "response.output_item.added":
            index = event["output_index"]
            assert index not in added and index == len(added), "output_index runs 0, 1, 2…"
            added[index] = event["item"]
            assert event["item"].get("status", "in_progress") == "in_progress"  # compaction items have none
            if event["item"]["type"] == "message":
                assert event["item"]["content"] == []
            continue
        if kind == "response.output_item.done":
            index = event["output_index"]
            assert index in added and index not in done
            assert event["item"]["id"] == added[index]["id"]
            done[index] = event["item"]
            continue
        if "item_id" not in event:
            continue
        index = event["output_index"]
        assert index in added and index not in done, f"{kind} outside its item"
        assert event["item_id"] == added[index]["id"]
        if "content_index" in event:
            key: tuple[Any, ...] = (event["item_id"], "content", event["content_index"])
        elif "command_index" in event:  # a hosted shell's output, command by command
            key = (event["item_id"], "command", event["command_index"])
        elif "summary_index" in event:
            key = (event["item_id"], "summary", event["summary_index"])
        else:
            key = (event["item_id"], "arguments")
        if kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
            assert key not in open_parts
            open_parts.add(key)
            texts[key] = []
        elif kind in ("response.content_part.done", "response.reasoning_summary_part.done"):
            assert key in open_parts, f"{kind} without its part"
            open_parts.discard(key)
            part = event["part"]
            assert part.get("text", part.get("refusal")) == "".join(texts[key])
        elif kind == "response.shell_call_output_content.delta":
            texts.setdefault(key, []).append(event["delta"])
        elif kind == "response.shell_call_output_content.done":
            for stream in ("stdout", "stderr"):
                streamed = "".join(delta.get(stream) or "" for delta in texts.get(key, []))  # type: ignore[attr-defined]
                assert streamed == "".join(output[stream] for output in event["output"]), f"{stream} deltas"
        elif kind.endswith(".delta"):
            if key[1] != "arguments":
                assert key in open_parts, f"{kind} before its part was added"
            texts.setdefault(key, []).append(event["delta"])
        elif kind.endswith(".done"):
            final = event.get("text", event.get("arguments", event.get("input", event.get("refusal", event.get("code")))))
            assert "".join(texts.get(key, [])) == final, f"deltas of {kind} do not join to the final value"

    assert not open_parts
    assert sorted(done) == sorted(added), "every added item is done"
    check_terminal_output(events)
    for item in response["output"]:
        if item["type"] == "function_call" and item["status"] == "completed":
            json.loads(item["arguments"])
    return response


def check_terminal_output(events: list[dict[str, Any]]) -> None:
    """What ends a stream holds every item the stream announced done, as announced, whatever
    the response's status: `output_item.done` says an item is final. For any
    stream, also one whose runner died before closing its items."""
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    output = events[-1]["response"]["output"]
    assert [item["id"] for item in output] == [done[i]["id"] for i in sorted(done)], "the items announced done"
    assert output == [done[i] for i in sorted(done)], "the items as announced"


def strip_ids(value: Any) -> Any:
    """A response's output without generated ids and timestamps, to compare two runs."""
    if isinstance(value, dict):
        return {k: strip_ids(v) for k, v in value.items() if k not in ("id", "call_id", "created_at", "completed_at")}
    if isinstance(value, list):
        return [strip_ids(v) for v in value]
    return value
