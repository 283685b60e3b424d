"""Bad requests get OpenAI's error envelope with a 4xx, never FastAPI's 422 or a 500."""

from __future__ import annotations

import httpx
import pytest


def assert_error(answer: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"input": "hi"}, "missing_required_parameter", "model"),
        ({"model": "test-model", "input": "hi", "temperature": 3}, "invalid_value", "temperature"),
        ({"model": "test-model", "input": "hi", "top_p": "high"}, "invalid_type", "top_p"),
        ({"model": "test-model", "input": "hi", "max_output_tokens": 5}, "invalid_value", "max_output_tokens"),
        ({"model": "test-model", "input": 7}, None, None),
        ({"model": "test-model", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "invalid_value", None),
        ({"model": "test-model", "input": "hi", "tools": [{"type": "function"}]}, "missing_required_parameter", "tools[0].name"),
        ({"model": "test-model", "input": "hi", "tools": ["x"]}, "invalid_value", "tools[0]"),
        ({"model": "test-model", "input": "hi", "tools": [{"type": "function", "name": "a"}],
          "tool_choice": {"type": "function", "name": "b"}}, "invalid_value", "tool_choice"),
        ({"model": "test-model", "input": "hi", "tool_choice": {"type": "web_search_preview"}}, "invalid_value", "tool_choice"),
        ({"model": "test-model", "input": "hi", "truncation": "sometimes"}, "invalid_value", "truncation"),
    ],
)
def test_invalid_requests_are_400(server, body, code, param):
    error = assert_error(httpx.post(f"{server.base_url}/responses", json=body), 400, code, param)
    assert error["type"] == "invalid_request_error"
    assert server.upstream.requests == []


def test_unparsable_bodies(server):
    assert_error(httpx.post(f"{server.base_url}/responses", content=b"{not json"), 400, "invalid_json")
    assert_error(httpx.post(f"{server.base_url}/responses", json=[1, 2]), 400, "invalid_json")
    assert_error(httpx.post(f"{server.base_url}/responses", content=b"\xff\xfe"), 400, "invalid_json")
    assert_error(httpx.post(f"{server.base_url}/chat/completions", content=b""), 400, "invalid_json")


def test_unknown_model_route_and_method(server):
    error = assert_error(httpx.post(f"{server.base_url}/responses", json={"model": "nope", "input": "x"}), 404,
                         "model_not_found", "model")  # fmt: skip
    assert "test-model" in error["message"]
    error = assert_error(httpx.get(f"{server.base_url}/nowhere"), 404)
    assert error["message"] == "Invalid URL (GET /v1/nowhere)"
    assert_error(httpx.get(f"{server.base_url}/responses"), 405)


def test_engine_down_is_a_clean_failure(upstream, unused_port):
    from responsekit.app import create_app
    from responsekit.config import Settings, UpstreamConfig

    from .harness import check_stream, read_sse, serve

    down = UpstreamConfig(name="down", base_url=f"http://127.0.0.1:{unused_port}/v1", models=["m"], connect_timeout=2)
    with serve(create_app(Settings(upstreams=[down], probe=False))) as url:
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "no_upstream" and health["upstreams"][0]["reachable"] is False
        assert_error(httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "x"}), 502, "server_error")
        with httpx.stream("POST", f"{url}/v1/responses", json={"model": "m", "input": "x", "stream": True}) as r:
            events, done = read_sse(r.iter_lines())
        assert done and check_stream(events)["status"] == "failed"
