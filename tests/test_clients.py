"""The real `openai` client against the server, and Codex CLI's two captured requests."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from .harness import DATA, check_response, check_stream, exchange, read_sse

CODEX = json.loads((DATA / "codex_request.json").read_text())


def test_sdk_stream_helper_completes(server):
    server.upstream.push(exchange("llamacpp_reasoning_text"))
    client = server.client()
    with client.responses.stream(model="test-model", input="Capital of France?") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "The capital of France is **Paris**."
    assert final.usage is not None and final.usage.total_tokens == 105


def test_sdk_stream_helper_with_parallel_tool_calls(server):
    server.upstream.push(exchange("llamacpp_parallel_tools"))
    client = server.client()
    tools = [{"type": "function", "name": "get_weather", "strict": False,
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]  # fmt: skip
    with client.responses.stream(model="test-model", input="weather?", tools=tools) as stream:
        argument_deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert [json.loads(c.arguments)["city"] for c in calls] == ["Paris", "Tokyo"]
    assert "".join(argument_deltas) == "".join(c.arguments for c in calls)
    assert final.output[0].type == "reasoning"


def test_sdk_create_streaming_and_not(server):
    server.upstream.push(exchange("openai_text"), exchange("openai_text"))
    client = server.client()
    events = list(client.responses.create(model="test-model", input="hi", stream=True))
    streamed = events[-1].response
    created = client.responses.create(model="test-model", input="hi")
    assert created.output_text == streamed.output_text == "Hello! How can I help you today? \u00dcber-caf\u00e9 \U0001F680 \u2028done."
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == created.output_text


def test_sdk_raises_openai_errors(server):
    client = server.client()
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="no-such-model", input="hi")
    assert missing.value.code == "model_not_found"
    server.upstream.push(exchange("openai_rate_limited"))
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="test-model", input="hi")
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="test-model", input="hi", temperature=3)
    assert bad.value.param == "temperature"


def test_sdk_sees_the_stream_error_as_api_error(server):
    server.upstream.push(exchange("llamacpp_error_midstream"))
    with pytest.raises(openai.APIError, match="KV cache is full"):
        list(server.client().responses.create(model="test-model", input="hi", stream=True))


@pytest.mark.parametrize("turn", ["first_request", "second_request"])
def test_codex_requests_get_a_complete_stream(server, turn):
    captured = CODEX[turn]
    body = {**captured["body"], "model": "test-model"}
    server.upstream.push(exchange("vllm_reasoning_tool"))
    headers = {k: v for k, v in captured["headers"].items() if k not in ("host", "content-length")}
    with httpx.stream("POST", f"{server.base_url}/responses", json=body, headers=headers, timeout=30) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    response = check_stream(events)
    assert events[-1]["type"] == "response.completed" and isinstance(response["id"], str)
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in done_items] == ["reasoning", "message", "function_call"]
    assert done_items[2]["name"] == "exec_command"

    sent = server.upstream.requests[-1]
    assert sent["messages"][0]["role"] == "system"
    assert "You are a coding agent running in the Codex CLI" in sent["messages"][0]["content"]
    assert "<skills_instructions>" in sent["messages"][0]["content"], "both developer messages merged"
    assert [m["role"] for m in sent["messages"][1:3]] == ["user", "user"]
    names = {t["function"]["name"] for t in sent["tools"]}
    assert {"exec_command", "spawn_agent", "wait_agent", "update_goal"} <= names, "namespace tools flattened"
    assert len(names) == len(sent["tools"])
    if turn == "second_request":
        assert sent["messages"][-2]["tool_calls"][0]["function"]["name"] == "exec_command"
        assert sent["messages"][-1]["role"] == "tool"
        assert sent["messages"][-1]["tool_call_id"] == "call_0e63e0f361ef4342bd021cac"
        assert "mock-tool-ran" in sent["messages"][-1]["content"]
    check_response(response)
