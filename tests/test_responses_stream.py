"""The Responses stream over recorded llama.cpp, vLLM and OpenAI chunk streams."""

from __future__ import annotations

import json

import httpx
import pytest

from .harness import check_response, check_stream, exchange, read_sse, strip_ids

TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather of a city", "strict": False,
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}},
    {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}}}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"}},
]  # fmt: skip

RECORDINGS = [
    "llamacpp_reasoning_text",
    "llamacpp_parallel_tools",
    "vllm_reasoning_tool",
    "vllm_custom_tool",
    "openai_parallel_tools",
    "openai_text",
    "openai_refusal",
]


def stream(server, body: dict) -> tuple[list[dict], bool]:
    with httpx.stream("POST", f"{server.base_url}/responses", json={**body, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        return read_sse(r.iter_lines())


@pytest.mark.parametrize("name", RECORDINGS)
def test_stream_and_fold_agree(server, name):
    recording = exchange(name)
    server.upstream.push(recording, recording)
    body = {"model": "test-model", "input": "hi", "tools": TOOLS}
    events, done = stream(server, body)
    assert done, "the stream ends with data: [DONE]"
    streamed = check_stream(events)
    assert streamed["status"] == "completed"

    folded = httpx.post(f"{server.base_url}/responses", json=body, timeout=30)
    assert folded.status_code == 200 and folded.headers["content-type"] == "application/json"
    check_response(folded.json())
    assert strip_ids(folded.json()["output"]) == strip_ids(streamed["output"])
    assert folded.json()["usage"] == streamed["usage"]


def test_reasoning_and_text(server):
    server.upstream.push(exchange("llamacpp_reasoning_text"))
    events, _ = stream(server, {"model": "test-model", "input": "Capital of France?"})
    response = check_stream(events)
    reasoning, message = response["output"]
    assert reasoning["type"] == "reasoning" and reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user asks for the capital of France. "
                                     "That is Paris. I should answer briefly."}]  # fmt: skip
    assert message["content"][0]["text"] == "The capital of France is **Paris**."
    assert response["output_text"] == "The capital of France is **Paris**."
    kinds = [e["type"] for e in events]
    assert "response.reasoning_text.delta" in kinds and "response.reasoning_text.done" in kinds
    assert response["usage"] == {
        "input_tokens": 74, "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
        "output_tokens": 31, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 105,
    }  # fmt: skip


def test_parallel_tool_calls_are_separate_items(server):
    server.upstream.push(exchange("openai_parallel_tools"))
    events, _ = stream(server, {"model": "test-model", "input": "weather?", "tools": TOOLS})
    response = check_stream(events)
    calls = response["output"]
    assert [c["type"] for c in calls] == ["function_call", "function_call"]
    assert [c["call_id"] for c in calls] == ["call_kP3uJ8nQ1wR5tY7vB2xZ9aC4", "call_mL6oI2uY8tR4eW1qA5sD3fG7"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Berlin"}, {"city": "Madrid"}]
    assert all(c["id"].startswith("fc_") and c["status"] == "completed" for c in calls)
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["name"] for e in done] == ["get_weather", "get_weather"]
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 64


def test_custom_tool_call_comes_back_as_custom_item(server):
    server.upstream.push(exchange("vllm_custom_tool"))
    events, _ = stream(server, {"model": "test-model", "input": "patch it", "tools": TOOLS})
    response = check_stream(events)
    (call,) = response["output"]
    assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch"
    assert call["input"] == '*** Begin Patch\n*** Add File: hello.txt\n+Hello, "world"!\n*** End Patch'
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 1 and "".join(deltas) == call["input"]
    offered = server.upstream.requests[0]["tools"]
    apply_patch = next(t["function"] for t in offered if t["function"]["name"] == "apply_patch")
    assert apply_patch["parameters"]["required"] == ["input"]
    assert "start: /.+/s" in apply_patch["description"]


def test_refusal(server):
    server.upstream.push(exchange("openai_refusal"))
    events, _ = stream(server, {"model": "test-model", "input": "something bad"})
    response = check_stream(events)
    assert response["output"][0]["content"] == [{"type": "refusal", "refusal": "I'm sorry, but I can't help with that."}]
    assert "response.refusal.delta" in [e["type"] for e in events]


def test_length_is_incomplete(server):
    server.upstream.push(exchange("llamacpp_length"))
    events, _ = stream(server, {"model": "test-model", "input": "tell a story", "max_output_tokens": 16})
    response = check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert server.upstream.requests[0]["max_tokens"] == 16


def test_error_mid_stream_fails_the_response(server):
    server.upstream.push(exchange("llamacpp_error_midstream"))
    events, done = stream(server, {"model": "test-model", "input": "hi"})
    response = check_stream(events)
    assert done
    error, failed = events[-2], events[-1]
    assert error["type"] == "error" and failed["type"] == "response.failed"
    assert error["message"] == error["error"]["message"] == "Failed to decode the batch: KV cache is full"
    assert error["code"] == error["error"]["code"] == "server_error"
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "Failed to decode the batch: KV cache is full"}


@pytest.mark.parametrize(
    ("name", "code", "status"),
    [("llamacpp_context_overflow", "context_length_exceeded", 400), ("openai_rate_limited", "rate_limit_exceeded", 429)],
)
def test_upstream_http_errors(server, name, code, status):
    server.upstream.push(exchange(name), exchange(name))
    events, _ = stream(server, {"model": "test-model", "input": "hi"})
    response = check_stream(events)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error", "response.failed"]
    assert response["error"]["code"] == code

    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": "hi"})
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


def test_engine_unreachable_fails_cleanly(server, upstream):
    upstream.push({"status": 200, "chunks": [{"t": 0, "data": {"choices": [{"index": 0, "delta": {"content": "x"}}]}}],
                   "end": "drop"})  # fmt: skip
    events, done = stream(server, {"model": "test-model", "input": "hi"})
    response = check_stream(events)
    assert done and response["status"] == "failed" and response["error"]["code"] == "server_error"
