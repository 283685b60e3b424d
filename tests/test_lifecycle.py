"""Disconnects cancel the engine's work, SIGTERM drains streams, exchanges can be recorded."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import (
    check_stream,
    output,
    read_sse,
    serve,
    slow_exchange,
    start_cli,
    strip_ids,
    text_exchange,
    wait_for,
)


def test_stream_disconnect_cancels_the_engine_request(server):
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(200, 0.05))
    with httpx.stream("POST", f"{server.base_url}/responses",
                      json={"model": "test-model", "input": "x", "stream": True}) as answer:  # fmt: skip
        lines = answer.iter_lines()
        while "response.output_text.delta" not in next(lines):
            pass
    wait_for(lambda: server.upstream.cancelled == 1)
    assert server.upstream.finished == 0


def test_non_streaming_disconnect_cancels_the_engine_request(server):
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(200, 0.05))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/chat/completions",
                   json={"model": "test-model", "messages": [{"role": "user", "content": "x"}]}, timeout=2)  # fmt: skip
    assert len(server.upstream.requests) == 1, "the engine had the request when the client left"
    wait_for(lambda: server.upstream.cancelled == 1)


def test_sigterm_lets_in_flight_streams_finish(upstream):
    upstream.time_scale = 1.0
    upstream.push(slow_exchange(30, 0.05))
    process, url = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--shutdown-timeout", "20")
    try:
        with httpx.stream("POST", f"{url}/v1/responses",
                          json={"model": "test-model", "input": "x", "stream": True}, timeout=30) as answer:  # fmt: skip
            lines = answer.iter_lines()
            first = next(lines)
            process.send_signal(signal.SIGTERM)
            events, done = read_sse([first, *lines])
        assert done and check_stream(events)["output_text"] == "x" * 30
        # uvicorn re-raises the signal once drained, so the exit status says "terminated by SIGTERM".
        assert process.wait(timeout=20) in (0, -signal.SIGTERM)
    finally:
        process.kill()
    assert "Shutting down" in output(process)


def test_record_and_replay(upstream, tmp_path):
    upstream.push(text_exchange("recorded answer", reasoning="some thought"))
    settings = Settings(upstreams=[UpstreamConfig(name="eng:1", base_url=upstream.url)], probe=False, record_dir=tmp_path)
    body = {"model": "test-model", "input": "hi", "stream": True}
    with serve(create_app(settings)) as url:
        with httpx.stream("POST", f"{url}/v1/responses", json=body) as answer:
            original = check_stream(read_sse(answer.iter_lines())[0])
    (file,) = tmp_path.glob("*.json")
    # Named and marked with the id of the request it served, for the inspector.
    served = answer.headers["x-request-id"]
    assert file.name.endswith(f"-eng_1--{served}.json")
    recording = json.loads(file.read_text())
    assert recording["request_id"] == served
    assert recording["request"]["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert recording["status"] == 200 and recording["chunks"][-1]["data"] == "[DONE]"
    assert all(isinstance(chunk["t"], float) for chunk in recording["chunks"])

    upstream.push(recording)
    with serve(create_app(Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False))) as url:
        with httpx.stream("POST", f"{url}/v1/responses", json=body) as answer:
            replayed = check_stream(read_sse(answer.iter_lines())[0])
    assert strip_ids(replayed["output"]) == strip_ids(original["output"])
    assert replayed["output_text"] == "recorded answer"


def test_cli_configuration_precedence(upstream, tmp_path):
    config = tmp_path / "responsekit.toml"
    config.write_text(
        'default_model = "from-toml"\n'
        'aliases = { "toml-alias" = "test-model" }\n'
        "[[upstreams]]\n"
        'name = "scripted"\n'
        f'base_url = "{upstream.url}"\n'
    )
    process, url = start_cli("--config", str(config), env={"RESPONSEKIT_DEFAULT_MODEL": "test-model", "RESPONSEKIT_PROBE": "false"})
    try:
        upstream.push(text_exchange("ok"), text_exchange("ok"))
        # The environment beats the file: the default model is the env's (which exists).
        answer = httpx.post(f"{url}/v1/responses", json={"model": "anything", "input": "x"})
        assert answer.status_code == 200 and upstream.requests[-1]["model"] == "test-model"
        # What only the file says still applies.
        assert httpx.post(f"{url}/v1/responses", json={"model": "toml-alias", "input": "x"}).status_code == 200
        assert [u["name"] for u in httpx.get(f"{url}/health").json()["upstreams"]] == ["scripted"]
    finally:
        process.terminate()
        process.wait(10)
    # A flag beats the environment.
    process, url = start_cli("--config", str(config), "--default-model", "nope",
                             env={"RESPONSEKIT_DEFAULT_MODEL": "test-model"})  # fmt: skip
    try:
        answer = httpx.post(f"{url}/v1/responses", json={"model": "anything", "input": "x"})
        assert answer.status_code == 404
    finally:
        process.terminate()
        process.wait(10)


def test_cli_refuses_bad_configuration(tmp_path):
    missing = subprocess.run([sys.executable, "-m", "responsekit", "serve", "--config", str(tmp_path / "none.toml")],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode != 0 and "config file not found" in missing.stderr
    (tmp_path / "bad.toml").write_text("prot = 1\n")
    typo = subprocess.run([sys.executable, "-m", "responsekit", "serve", "--config", str(tmp_path / "bad.toml")],
                          capture_output=True, text=True)  # fmt: skip
    assert typo.returncode != 0 and "prot" in typo.stderr
    alias = subprocess.run([sys.executable, "-m", "responsekit", "serve", "--alias", "novalue"], capture_output=True, text=True)
    assert alias.returncode != 0 and "NAME=TARGET" in alias.stderr


def test_settings_from_environment_shorthands(monkeypatch):
    from responsekit.config import load_settings

    monkeypatch.setenv("RESPONSEKIT_UPSTREAMS", "local=http://127.0.0.1:8080/v1/, http://10.0.0.2:8000/v1")
    monkeypatch.setenv("RESPONSEKIT_ALIASES", "gpt-5-codex=qwen3-coder, gpt-4o=llama")
    settings = load_settings()
    assert [(u.name, u.base_url) for u in settings.upstreams] == [
        ("local", "http://127.0.0.1:8080/v1"), ("10.0.0.2:8000", "http://10.0.0.2:8000/v1"),
    ]  # fmt: skip
    assert settings.aliases == {"gpt-5-codex": "qwen3-coder", "gpt-4o": "llama"}
    monkeypatch.setenv("RESPONSEKIT_UPSTREAMS", '[{"name": "o", "base_url": "https://api.openai.com/v1", "api_key": "k"}]')
    assert load_settings().upstreams[0].api_key == "k"
