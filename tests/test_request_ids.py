"""Request ids: `x-request-id` on every answer, in log lines (text and JSON) and in the store."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import httpx
import pytest
from pydantic import ValidationError
from websockets.sync.client import connect

from responsekit.app import create_app
from responsekit.config import Settings, load_settings
from responsekit.operations.logs import ACCESS_LOGGER
from responsekit.store import Store

from .conftest import DATABASES
from .harness import (
    check_response,
    check_stream,
    exchange,
    output,
    read_sse,
    serve,
    start_cli,
    text_exchange,
    wait_for,
)

NEW_ID = re.compile(r"req_[0-9a-f]{48}")
MESSAGES_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "test"}


def new_id(answer: httpx.Response) -> str:
    request_id = answer.headers["x-request-id"]
    assert NEW_ID.fullmatch(request_id), request_id
    return request_id


def test_every_answer_carries_a_request_id(server):
    url, seen = server.url, set()
    server.upstream.push(*(text_exchange("Hello!") for _ in range(5)))
    with httpx.Client(base_url=url, timeout=10) as client:
        answer = client.post("/v1/responses", json={"model": "test-model", "input": "hi"})
        check_response(answer.json())
        seen.add(new_id(answer))
        with client.stream("POST", "/v1/responses", json={"model": "test-model", "input": "hi", "stream": True}) as answer:
            check_stream(read_sse(answer.iter_lines())[0])
            seen.add(new_id(answer))
        answer = client.post("/v1/chat/completions", json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "Hello!"
        seen.add(new_id(answer))
        chat = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=chat) as answer:
            assert answer.status_code == 200 and b"[DONE]" in answer.read()
            seen.add(new_id(answer))
        message = {"model": "test-model", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
        answer = client.post("/v1/messages", json=message, headers=MESSAGES_HEADERS)
        assert answer.status_code == 200 and answer.json()["content"][0]["text"] == "Hello!"
        seen.add(new_id(answer))
        answer = client.post("/v1/conversations", json={"items": [{"role": "user", "content": "hi"}]})
        assert answer.status_code == 200
        seen.add(new_id(answer))
        answer = client.post("/v1/files", files={"file": ("a.txt", b"text")}, data={"purpose": "assistants"})
        assert answer.status_code == 200 and answer.json()["object"] == "file"
        seen.add(new_id(answer))
        for method, path, body, status in [
            ("POST", "/v1/responses", {"model": "test-model", "input": 3}, 400),
            ("GET", "/v1/responses/resp_unknown", None, 404),
            ("POST", "/v1/responses", {"model": "no-such-model", "input": "hi"}, 404),
            ("GET", "/v1/no/such/route", None, 404),
            ("POST", "/v1/chat/completions", {"model": "test-model"}, 400),
            ("GET", "/v1/conversations/conv_unknown", None, 404),
            ("GET", "/v1/files/file_unknown", None, 404),
            ("GET", "/health", None, 200),
        ]:  # fmt: skip
            answer = client.request(method, path, json=body)
            assert answer.status_code == status, (path, answer.text)
            seen.add(new_id(answer))
        answer = client.post("/v1/messages", json={"model": "test-model"}, headers=MESSAGES_HEADERS)
        assert answer.status_code == 400 and answer.json()["type"] == "error"
        seen.add(new_id(answer))
    assert len(seen) == 16  # a new id each time


def test_a_bug_answers_500_with_its_request_id(settings):
    app = create_app(settings)

    async def bug() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/bug", bug)
    with serve(app) as url:
        answer = httpx.get(f"{url}/bug", headers={"x-request-id": "bug-1"})
    assert answer.status_code == 500 and answer.json()["error"]["type"] == "server_error"
    assert answer.headers["x-request-id"] == "bug-1"


@pytest.mark.parametrize(
    ("sent", "kept"),
    [("client-id_1.2:3", True), ("a" * 128, True), ("has space", False), ("a" * 129, False), ("semi;colon", False)],
)
def test_a_clients_id_is_kept_if_it_is_a_sane_token(server, sent, kept):
    answer = httpx.get(f"{server.base_url}/models", headers={"x-request-id": sent})
    assert answer.status_code == 200
    if kept:
        assert answer.headers["x-request-id"] == sent
    else:
        new_id(answer)


def test_the_websocket_handshake_carries_a_request_id(server):
    with connect(f"ws{server.base_url.removeprefix('http')}/responses", additional_headers={"x-request-id": "ws-1"}) as socket:
        assert socket.response.headers["x-request-id"] == "ws-1"
    with connect(f"ws{server.base_url.removeprefix('http')}/responses") as socket:
        assert NEW_ID.fullmatch(socket.response.headers["x-request-id"])


def test_log_lines_carry_the_request_id_route_and_model(server, caplog):
    caplog.set_level(logging.INFO)
    access = logging.getLogger(ACCESS_LOGGER)  # its lines do not propagate (a plain handler of its own)
    access.addHandler(caplog.handler)
    try:
        reference = {"model": "test-model", "input": [{"type": "item_reference", "id": "msg_unknown"}, "hi"]}
        server.upstream.push(text_exchange("Hello!"))
        answer = httpx.post(f"{server.base_url}/responses", json=reference, headers={"x-request-id": "mine-1"})
        assert answer.status_code == 200
        # A background run logs after its request was answered: under that request's id.
        history = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "reply"},
                   {"role": "user", "content": "new"}]  # fmt: skip
        server.upstream.push(exchange("llamacpp_context_overflow"), text_exchange("fits now"))
        background = httpx.post(f"{server.base_url}/responses", json={
            "model": "test-model", "input": history, "truncation": "auto", "background": True})  # fmt: skip
        started = new_id(background)
        response_id = background.json()["id"]
        deadline = time.monotonic() + 10
        while httpx.get(f"{server.base_url}/responses/{response_id}").json()["status"] != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # An access line is written once its answer is sent: maybe after the client read it.
        wait_for(lambda: any(r.name == ACCESS_LOGGER and r.path == f"/v1/responses/{response_id}"
                             for r in caplog.records))  # fmt: skip
    finally:
        access.removeHandler(caplog.handler)
    skipped = next(r for r in caplog.records if "item_reference to unknown item" in r.getMessage())
    assert (skipped.request_id, skipped.route) == ("mine-1", "/v1/responses")
    line = next(r for r in caplog.records if r.name == ACCESS_LOGGER and r.request_id == "mine-1")
    assert (line.method, line.path, line.status, line.model) == ("POST", "/v1/responses", 200, "test-model")
    assert line.duration_ms > 0
    retried = next(r for r in caplog.records if "context overflow: retrying" in r.getMessage())
    assert (retried.request_id, retried.model) == (started, "test-model")
    polls = [r for r in caplog.records if r.name == ACCESS_LOGGER and r.path == f"/v1/responses/{response_id}"]
    assert polls and all(r.route == "/v1/responses/{response_id}" and r.request_id != started for r in polls)


def test_json_log_lines_from_the_command(upstream):
    process, url = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--log-format", "json")
    try:
        upstream.push(text_exchange("Hello!"))
        answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "hi", "stream": True},
                            headers={"x-request-id": "json-1"})  # fmt: skip
        assert answer.status_code == 200 and answer.headers["x-request-id"] == "json-1"
        missing = httpx.get(f"{url}/v1/responses/resp_unknown")
        assert missing.status_code == 404
        time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(20)
    lines = [json.loads(line) for line in output(process).splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    streamed = next(line for line in lines if line.get("request_id") == "json-1")
    assert streamed | {
        "logger": ACCESS_LOGGER, "level": "info", "method": "POST", "path": "/v1/responses", "route": "/v1/responses",
        "status": 200, "model": "test-model",
    } == streamed and streamed["duration_ms"] > 0  # fmt: skip
    unknown = next(line for line in lines if line.get("path") == "/v1/responses/resp_unknown")
    assert unknown["status"] == 404 and unknown["request_id"] == missing.headers["x-request-id"]


def test_log_format_setting(monkeypatch, tmp_path):
    assert Settings().log_format == "text"
    monkeypatch.setenv("RESPONSEKIT_LOG_FORMAT", "json")
    assert Settings().log_format == "json"
    monkeypatch.delenv("RESPONSEKIT_LOG_FORMAT")
    config = tmp_path / "responsekit.toml"
    config.write_text('log_format = "json"\n')
    assert load_settings(config).log_format == "json"
    with pytest.raises(ValidationError):
        Settings(log_format="xml")


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_stored_response_keeps_the_id_of_its_request(server, database_url):
    server.upstream.push(text_exchange("one"), text_exchange("two"), text_exchange("three"))
    base = server.base_url
    foreground = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "hi"}, headers={"x-request-id": "fg-1"})
    streamed = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "hi", "stream": True})
    streamed_id = next(e for e in read_sse(streamed.iter_lines())[0] if e["type"] == "response.completed")["response"]["id"]
    background = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "hi", "background": True})
    deadline = time.monotonic() + 10
    while httpx.get(f"{base}/responses/{background.json()['id']}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)

    async def stored() -> list[str | None]:
        store = await Store.open(database_url)
        try:
            ids = [foreground.json()["id"], streamed_id, background.json()["id"], "resp_unknown"]
            return [await store.request_id("", response_id) for response_id in ids]
        finally:
            await store.close()

    assert asyncio.run(stored()) == ["fg-1", streamed.headers["x-request-id"], background.headers["x-request-id"], None]
