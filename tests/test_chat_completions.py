"""`/v1/chat/completions` rendered from the canonical stream, in OpenAI's delta format."""

from __future__ import annotations

import json

import httpx
import pytest

from .harness import check_chat_chunk, check_chat_completion, exchange


def chat_stream(server, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json={**body, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        lines = list(r.iter_lines())
    payloads = [line[6:] for line in lines if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    assert all(line == "" or line.startswith("data: ") for line in lines)
    return [json.loads(p) for p in payloads[:-1]]


def fold(chunks: list[dict]) -> dict:
    """Join chunk deltas the way OpenAI clients do."""
    message: dict = {"content": "", "reasoning_content": "", "tool_calls": {}}
    finish = None
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            message["content"] += delta.get("content") or ""
            message["reasoning_content"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                slot = message["tool_calls"].setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += (call.get("function") or {}).get("name") or ""
                slot["arguments"] += (call.get("function") or {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {**message, "finish": finish}


@pytest.mark.parametrize("name", ["llamacpp_reasoning_text", "vllm_reasoning_tool", "openai_parallel_tools"])
def test_chat_stream_and_completion(server, name):
    server.upstream.push(exchange(name), exchange(name))
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            "stream_options": {"include_usage": True}}  # fmt: skip
    chunks = chat_stream(server, body)
    for chunk in chunks:
        check_chat_chunk(chunk)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    streamed = fold(chunks)

    answer = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200
    completion = check_chat_completion(answer.json())
    message = answer.json()["choices"][0]["message"]
    assert (message["content"] or "") == streamed["content"]
    assert (message.get("reasoning_content") or "") == streamed["reasoning_content"]
    assert [c["function"]["arguments"] for c in message.get("tool_calls") or ()] == [
        c["arguments"] for c in streamed["tool_calls"].values()
    ]
    assert completion.choices[0].finish_reason == streamed["finish"]


def test_vllm_reasoning_field_comes_out_as_reasoning_content(server):
    server.upstream.push(exchange("vllm_reasoning_tool"))
    chunks = chat_stream(server, {"model": "test-model", "messages": [{"role": "user", "content": "ls"}]})
    streamed = fold(chunks)
    assert streamed["reasoning_content"].startswith("Okay, the user wants to list files")
    assert streamed["content"] == "Let me check."
    (call,) = streamed["tool_calls"].values()
    assert call["name"] == "exec_command" and call["id"] == "chatcmpl-tool-3c9b1f0e2d7a4c58"
    assert json.loads(call["arguments"]) == {"cmd": "ls -la /tmp", "workdir": "/home/user"}
    assert streamed["finish"] == "tool_calls"


def test_chat_request_reaches_the_engine(server):
    server.upstream.push(exchange("openai_text"))
    messages = [
        {"role": "developer", "content": "be terse"},
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
        {"role": "assistant", "content": None, "reasoning_content": "think",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]  # fmt: skip
    body = {"model": "test-model", "messages": messages, "max_completion_tokens": 50, "stop": "END", "seed": 3,
            "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"}  # fmt: skip
    answer = httpx.post(f"{server.base_url}/chat/completions", json=body)
    assert answer.status_code == 200
    sent = server.upstream.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "be terse"},
        {"role": "user", "content": [{"type": "text", "text": "see"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "auto"}}]},
        {"role": "assistant", "content": None, "reasoning_content": "think",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
    ]  # fmt: skip
    assert sent["max_tokens"] == 50 and sent["stop"] == ["END"] and sent["seed"] == 3
    assert sent["tool_choice"] == "required"


def test_chat_errors(server):
    server.upstream.push(exchange("llamacpp_context_overflow"), exchange("llamacpp_error_midstream"))
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{server.base_url}/chat/completions", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
    chunks = chat_stream(server, body)
    assert chunks[-1]["error"]["message"] == "Failed to decode the batch: KV cache is full"
    bad = httpx.post(f"{server.base_url}/chat/completions", json={"model": "test-model", "messages": []})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
