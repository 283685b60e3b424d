"""Faults of the engine: every one ends the client's stream properly, is stored with the
right status, and leaves no task, connection or file descriptor behind."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import (
    ScriptedUpstream,
    check_response,
    check_stream,
    read_sse,
    serve,
    start_cli,
    text_exchange,
    wait_for,
)

STALL_TIMEOUT = 1.0
"""The scripted engine's read timeout: a stall longer than this fails the response."""


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"t": 0, "data": {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}}  # fmt: skip


def _started(*chunks: dict[str, Any], **script: Any) -> dict[str, Any]:
    """A stream that has begun an answer, then `chunks`."""
    return {"status": 200, "chunks": [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Part of "}),
                                      _chunk({"content": "an answer"}), *chunks], **script}  # fmt: skip


def _bad_arguments() -> dict[str, Any]:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    pieces = [_chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}) for part in ('{"city": ', '"Par')]
    return {"status": 200, "chunks": [_chunk({"tool_calls": [call]}), *pieces, _chunk({}, "tool_calls"),
                                      {"t": 0, "data": "[DONE]"}]}  # fmt: skip


def _error(status: int, message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"status": status, "error_body": json.dumps({"error": {"message": message, "type": kind}})}


TRICKLED = "Trickled, one byte at a time: caf\u00e9 \U0001F680."

FAULTS: dict[str, tuple[dict[str, Any] | None, str, str | None, int]] = {
    # name: (the engine's script, or None for a dead engine; the response's status and error
    # code; the HTTP status of a non-streaming answer)
    "connection_refused": (None, "failed", "server_error", 502),
    "dropped_mid_stream": (_started(end="drop"), "failed", "server_error", 502),
    "stalled_past_timeout": (_started({"t": STALL_TIMEOUT * 4, "data": _chunk({"content": "late"})["data"]}),
                             "failed", "server_error", 504),
    "rate_limited_429": (_error(429, "Rate limit reached for requests", "rate_limit_error"), "failed",
                         "rate_limit_exceeded", 429),
    "engine_error_500": (_error(500, "CUDA error: out of memory"), "failed", "server_error", 502),
    "context_overflow_400": (_error(400, "the request exceeds the available context size, try increasing it",
                                    "exceed_context_size_error"), "failed", "context_length_exceeded", 400),
    "malformed_sse": (_started({"t": 0, "data": '{"choices": [{"delta": {"content": "x"'}), "failed", "server_error",
                      502),
    "misshapen_chunk": (_started({"t": 0, "data": {"choices": [{"index": 0, "delta": "not an object"}]}}), "failed",
                        "server_error", 502),
    "misshapen_choices": (_started({"t": 0, "data": {"choices": ["not an object"], "usage": 7}}), "failed",
                          "server_error", 502),
    "misshapen_calls": (_started(_chunk({"tool_calls": [{"index": [0], "id": 7, "function": {"name": 3}}]},
                                        finish=["stop"]), _chunk({"tool_calls": ["x"]})), "failed", "server_error",
                        502),
    "invalid_tool_arguments": (_bad_arguments(), "failed", "server_error", 502),
    "trickle": ({**text_exchange(TRICKLED, pieces=5), "trickle": 0.0005}, "completed", None, 200),
}
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]


def _body(fault: str, **extra: Any) -> dict[str, Any]:
    model = "dead-model" if FAULTS[fault][0] is None else "test-model"
    return {"model": model, "input": "What is the weather?", "tools": TOOLS, **extra}


def _push(upstream: ScriptedUpstream, fault: str) -> None:
    script = FAULTS[fault][0]
    if script is not None:
        upstream.push(json.loads(json.dumps(script)))


def _upstreams(upstream: ScriptedUpstream, dead_port: int) -> list[UpstreamConfig]:
    return [
        UpstreamConfig(name="scripted", base_url=upstream.url, timeout=STALL_TIMEOUT),  # type: ignore[attr-defined]
        UpstreamConfig(name="dead", base_url=f"http://127.0.0.1:{dead_port}/v1", models=["dead-model"],
                       connect_timeout=2),
    ]


@pytest.fixture
def faulty(upstream: ScriptedUpstream, database_url: str, unused_port: int) -> Iterator[tuple[str, ScriptedUpstream]]:
    upstream.time_scale = 1.0
    settings = Settings(upstreams=_upstreams(upstream, unused_port), probe=False, database_url=database_url)
    with serve(_with_task_count(create_app(settings))) as url:
        yield f"{url}/v1", upstream


def _with_task_count(app: Any) -> Any:
    """The app with a route counting the tasks of its event loop (for this module only)."""

    @app.get("/_tasks")
    async def tasks() -> int:
        return len(asyncio.all_tasks())

    return app


def _finished(base: str, response_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        response = httpx.get(f"{base}/responses/{response_id}").json()
        return response if response["status"] not in ("queued", "in_progress") else None

    return wait_for(done, timeout=20)


def _check_outcome(response: dict[str, Any], fault: str) -> None:
    _, status, code, _ = FAULTS[fault]
    assert response["status"] == status
    assert (response["error"] or {}).get("code") == code
    if status == "completed":
        assert response["output_text"] == TRICKLED
    if fault == "invalid_tool_arguments":  # announced done, so in the output: cut short, never to be made
        assert [(item["type"], item["status"]) for item in response["output"]] == [("function_call", "incomplete")]


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("fault", FAULTS)
def test_fault_ends_the_stream_and_is_stored_with_its_status(faulty, fault):
    base, upstream = faulty
    _push(upstream, fault)
    with httpx.stream("POST", f"{base}/responses", json=_body(fault, stream=True), timeout=30) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    streamed = check_stream(events)
    _check_outcome(streamed, fault)
    if streamed["status"] == "failed":
        error = next(event for event in events if event["type"] == "error")
        assert error["code"] == streamed["error"]["code"] and error["message"]
    stored = httpx.get(f"{base}/responses/{streamed['id']}").json()
    check_response(stored)
    assert stored == streamed

    _push(upstream, fault)
    queued = httpx.post(f"{base}/responses", json=_body(fault, background=True), timeout=30).json()
    assert queued["status"] == "queued"
    finished = _finished(base, queued["id"])
    check_response(finished)
    _check_outcome(finished, fault)
    with httpx.stream("GET", f"{base}/responses/{queued['id']}", params={"stream": "true"}, timeout=30) as replay:
        events, done = read_sse(replay.iter_lines())
    assert done
    replayed = check_stream(events)
    _check_outcome(replayed, fault)
    assert replayed == finished, "the stored response is the one the replayed stream ends with"


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_in_a_non_streaming_request_is_an_error_answer(faulty, fault):
    base, upstream = faulty
    _push(upstream, fault)
    answer = httpx.post(f"{base}/responses", json=_body(fault), timeout=30)
    _, status, code, http_status = FAULTS[fault]
    assert answer.status_code == http_status, answer.text
    if status == "completed":
        assert answer.json()["output_text"] == TRICKLED
        return
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if http_status < 500:
        assert error["code"] == code
    _push(upstream, fault)
    chat = httpx.post(f"{base}/chat/completions", timeout=30, json={"model": _body(fault)["model"],
                      "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert chat.status_code >= 400 or fault == "invalid_tool_arguments"  # chat passes the model's arguments on


def _all_faults(base: str, upstream: ScriptedUpstream) -> list[str]:
    """Every fault once streaming, once not, once in the background; returns the background ids."""
    background = []
    for fault in FAULTS:
        _push(upstream, fault)
        with httpx.stream("POST", f"{base}/responses", json=_body(fault, stream=True), timeout=30) as answer:
            assert read_sse(answer.iter_lines())[1]
        _push(upstream, fault)
        httpx.post(f"{base}/responses", json=_body(fault, store=False), timeout=30)
        _push(upstream, fault)
        background.append(httpx.post(f"{base}/responses", json=_body(fault, background=True), timeout=30).json()["id"])
    for response_id in background:
        _finished(base, response_id)
    return background


def test_faults_leave_no_task_behind(faulty):
    base, upstream = faulty
    app_url = base.removesuffix("/v1")

    _all_faults(base, upstream)  # warm-up: pools, lazily made objects
    before = httpx.get(f"{app_url}/_tasks").json()
    for _ in range(3):
        _all_faults(base, upstream)
    # A finished run's task ends just after its stored status changes: give it a moment.
    wait_for(lambda: httpx.get(f"{app_url}/_tasks").json() <= before, timeout=10)


def _open_fds(pid: int) -> dict[str, int]:
    """The process's open file descriptors by kind (socket, pipe, file...)."""
    kinds: dict[str, int] = {}
    for entry in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{entry}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def test_faults_leave_no_connection_or_file_descriptor_behind(upstream, unused_port, tmp_path):
    upstream.time_scale = 1.0
    config = tmp_path / "responsekit.toml"
    config.write_text(
        "probe = false\n"
        "[[upstreams]]\n"
        f'name = "scripted"\nbase_url = "{upstream.url}"\ntimeout = {STALL_TIMEOUT}\n'  # type: ignore[attr-defined]
        "[[upstreams]]\n"
        f'name = "dead"\nbase_url = "http://127.0.0.1:{unused_port}/v1"\nmodels = ["dead-model"]\nconnect_timeout = 2\n'
    )
    process, url = start_cli("--config", str(config))
    try:
        base = f"{url}/v1"
        _all_faults(base, upstream)  # warm-up: the database, the pools, lazily made objects
        before = _open_fds(process.pid)
        for _ in range(3):
            _all_faults(base, upstream)
        # Sockets: at most one idle keep-alive connection to the engine more than before (the
        # pool keeps what the last request used); every faulty one was closed. The server closes
        # its end of a client's connection when it reads the client's close, a moment after the
        # call returned: a leaked socket stays open, one being closed is gone within that moment.
        def settled() -> dict[str, int] | None:
            fds = _open_fds(process.pid)
            return fds if fds.get("socket", 0) <= before.get("socket", 0) + 1 else None

        try:
            after = wait_for(settled, timeout=5)
        except AssertionError:  # still more after 5 s: the assertion below shows them
            after = _open_fds(process.pid)
    finally:
        process.terminate()
        process.wait(20)
    assert after.get("socket", 0) <= before.get("socket", 0) + 1, (before, after)
    assert {k: v for k, v in after.items() if k != "socket"} == {k: v for k, v in before.items() if k != "socket"}


class ClosingEngine:
    """An engine on a raw socket: it reads each request, closes the first `closes` connections
    without a word, and answers the others with a short stream."""

    def __init__(self, closes: int) -> None:
        self.closes = closes
        self.requests = 0
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        body = "".join(f"data: {json.dumps(chunk['data']) if not isinstance(chunk['data'], str) else chunk['data']}\n\n"
                       for chunk in text_exchange("Answered on a new connection.")["chunks"]).encode()  # fmt: skip
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += connection.recv(65536)
                if not head.startswith(b"POST /v1/chat/completions "):
                    connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    continue
                self.requests += 1
                if self.closes > 0:
                    self.closes -= 1
                    continue
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip

    def close(self) -> None:
        self._socket.close()


@pytest.mark.parametrize(("closes", "status"), [(1, "completed"), (5, "failed")])
def test_a_connection_closed_before_any_answer_is_tried_once_more(closes, status):
    engine = ClosingEngine(closes)
    settings = Settings(upstreams=[UpstreamConfig(name="closing", base_url=engine.url, models=["m"])], probe=False)
    try:
        with serve(create_app(settings)) as url:
            with httpx.stream("POST", f"{url}/v1/responses", json={"model": "m", "input": "x", "stream": True}) as r:
                response = check_stream(read_sse(r.iter_lines())[0])
    finally:
        engine.close()
    assert response["status"] == status and engine.requests == 2
    if status == "completed":
        assert response["output_text"] == "Answered on a new connection."
