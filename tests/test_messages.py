"""`/v1/messages`: Anthropic's Messages API rendered from the canonical stream.

Every streamed event is validated strictly against the `anthropic` SDK's own types, and the
non-streamed `Message` too; the SDK's client drives the API as Anthropic's users do.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import Message, MessageTokensCount, ModelInfo, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from responsekit.api import streaming as api_streaming
from responsekit.api.messages.render import error_type
from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .conftest import Server
from .harness import (
    DATA,
    ScriptedUpstream,
    exchange,
    read_sse,
    serve,
    slow_exchange,
    text_exchange,
    tool_call_exchange,
    tool_loop,
)
from .test_faults import FAULTS, _upstreams
from .test_vector_stores import pdf_with_text

EVENT = TypeAdapter(RawMessageStreamEvent)
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "test"}
TOOLS = [{"name": "get_weather", "description": "The weather", "input_schema": {"type": "object", "properties":
          {"city": {"type": "string"}}, "required": ["city"]}}]  # fmt: skip


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "test-model", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}], **extra}


def check_events(events: list[dict[str, Any]], adapter: TypeAdapter[Any] = EVENT) -> None:
    """Each event validates against the SDK (`adapter`: its beta types for beta features), and
    the sequence is Anthropic's: `message_start` first; blocks one at a time, each at the next
    index, deltas only inside their started block; then `message_delta` and `message_stop`, or
    one `error` event last."""
    assert events[0]["type"] == "message_start"
    assert events[0]["message"]["id"].startswith("msg_")
    assert events[0]["message"]["usage"]["input_tokens"] > 0, "real input usage at start"
    started, open_block = 0, None
    for position, event in enumerate(events):
        kind = event["type"]
        if kind == "ping":
            assert event == {"type": "ping"}
            continue
        if kind == "error":
            assert position == len(events) - 1, "an error ends the stream"
            if event["error"]["type"] != "request_too_large":
                ErrorResponse.model_validate(event, strict=True)
            return
        adapter.validate_python(event, strict=True)
        if kind == "content_block_start":
            assert open_block is None and event["index"] == started, "blocks run 0, 1, 2… one at a time"
            open_block = started
            started += 1
        elif kind == "content_block_delta":
            assert event["index"] == open_block, "a delta inside its started block"
            if event["delta"]["type"] == "input_json_delta":
                assert event["delta"]["partial_json"], "no empty argument deltas"
        elif kind == "content_block_stop":
            assert event["index"] == open_block
            open_block = None
        elif kind == "message_delta":
            assert open_block is None and event["delta"]["stop_reason"]
    assert open_block is None
    assert [e["type"] for e in events[-2:]] == ["message_delta", "message_stop"]


def fold(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The Message a client assembles from the events."""
    message = copy.deepcopy(events[0]["message"])
    arguments: dict[int, str] = {}
    for event in events:
        if event["type"] == "content_block_start":
            message["content"].append(copy.deepcopy(event["content_block"]))
        elif event["type"] == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                arguments[event["index"]] = arguments.get(event["index"], "") + delta["partial_json"]
        elif event["type"] == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
    for index, text in arguments.items():
        message["content"][index]["input"] = json.loads(text)
    return message


def stream(url: str, request: dict[str, Any], path: str = "/v1/messages", adapter: TypeAdapter[Any] = EVENT,
           **options: Any) -> list[dict[str, Any]]:  # fmt: skip
    with httpx.stream("POST", f"{url}{path}", json={**request, "stream": True}, headers=HEADERS, timeout=30,
                      **options) as answer:  # fmt: skip
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        events, done = read_sse(answer.iter_lines())
    assert not done, "no [DONE] in Anthropic's stream"
    check_events(events, adapter)
    return events


def create(url: str, request: dict[str, Any], **options: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/messages", json=request, headers={**HEADERS, **options.pop("headers", {})},
                      timeout=30, **options)  # fmt: skip


def without_signatures(message: dict[str, Any]) -> dict[str, Any]:
    """A message without what differs between two runs (its id, and the signatures' nonces)."""
    content = [{key: value for key, value in block.items() if key != "signature"} for block in message["content"]]
    return {**message, "id": None, "content": content}


def client(url: str, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="test", max_retries=0, **options)


# --- the stream and the message ------------------------------------------------------------


@pytest.mark.parametrize("name", ["llamacpp_reasoning_text", "vllm_reasoning_tool", "openai_parallel_tools",
                                  "llamacpp_parallel_tools", "openai_refusal", "llamacpp_length"])  # fmt: skip
def test_stream_folds_into_the_message(server, name):
    server.upstream.push(exchange(name), exchange(name))
    events = stream(server.url, body(tools=TOOLS))
    answer = create(server.url, body(tools=TOOLS))
    assert answer.status_code == 200
    message = answer.json()
    Message.model_validate(message, strict=True)
    assert without_signatures(message) == without_signatures(fold(events))
    kinds = [block["type"] for block in message["content"]]
    assert message["stop_reason"] == ("tool_use" if "tool_use" in kinds else
                                      "max_tokens" if name == "llamacpp_length" else "end_turn")  # fmt: skip
    assert message["usage"]["output_tokens"] > 0 and message["usage"]["input_tokens"] > 0


def test_tool_use_after_thinking_and_text_gets_the_next_index(server):
    script = tool_call_exchange("get_weather", {"city": "Paris"}, reasoning="I will look it up.")
    text = text_exchange("Let me check.")["chunks"][1:-2]
    first_call = next(i for i, chunk in enumerate(script["chunks"]) if "tool_calls" in str(chunk["data"]))
    script["chunks"][first_call:first_call] = text  # the text after the reasoning, before the call
    server.upstream.push(script)
    events = stream(server.url, body(tools=TOOLS))
    starts = [(e["index"], e["content_block"]["type"]) for e in events if e["type"] == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "text"), (2, "tool_use")]
    arguments = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
                        and e["delta"]["type"] == "input_json_delta")  # fmt: skip
    assert json.loads(arguments) == {"city": "Paris"} and len(arguments) > 7, "streamed as the engine wrote it"
    assert fold(events)["stop_reason"] == "tool_use"


def test_the_sdk_creates_and_streams(server):
    sdk = client(server.url)
    server.upstream.push(text_exchange("Hello from the engine.", reasoning="Say hello."))
    message = sdk.messages.create(model="test-model", max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[1].text == "Hello from the engine." and message.stop_reason == "end_turn"

    server.upstream.push(exchange("openai_parallel_tools"))
    with sdk.messages.stream(model="test-model", max_tokens=100, tools=TOOLS,
                             messages=[{"role": "user", "content": "weather in two cities"}]) as events:  # fmt: skip
        final = events.get_final_message()
    calls = [block for block in final.content if block.type == "tool_use"]
    assert len(calls) == 2 and all(call.name == "get_weather" and call.input for call in calls), "parallel tool use"
    assert final.stop_reason == "tool_use"

    server.upstream.push(text_exchange("streamed words"))
    with sdk.messages.stream(model="test-model", max_tokens=100, messages=[{"role": "user", "content": "go"}]) as s:
        assert "".join(s.text_stream) == "streamed words"


def test_a_tool_loop_with_the_sdk(server):
    server.upstream.responder = tool_loop({"get_weather": {"city": "Paris"}})
    sdk = client(server.url)
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = sdk.messages.create(model="test-model", max_tokens=200, tools=TOOLS, messages=messages,
                                thinking={"type": "enabled", "budget_tokens": 2048})  # fmt: skip
    (call,) = [block for block in first.content if block.type == "tool_use"]
    messages += [first.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "sunny, 24C"}]}]}]
    second = sdk.messages.create(model="test-model", max_tokens=200, tools=TOOLS, messages=messages,
                                 thinking={"type": "enabled", "budget_tokens": 2048})  # fmt: skip
    assert second.content[-1].text == "The tool said: sunny, 24C" and second.stop_reason == "end_turn"
    sent = server.upstream.requests[-1]
    assert sent["messages"][-2]["reasoning_content"] == "I should call get_weather.", "the reasoning came back"
    assert sent["messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24C"}


# --- thinking signatures ---------------------------------------------------------------------


@pytest.mark.parametrize("display", ["summarized", "omitted"])
def test_thinking_survives_the_round_trip(server, display):
    server.upstream.push(tool_call_exchange("get_weather", {"city": "Oslo"}, reasoning="Oslo needs a lookup."))
    thinking = {"type": "enabled", "budget_tokens": 8000, "display": display}
    events = stream(server.url, body(tools=TOOLS, thinking=thinking))
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert ("thinking_delta" in deltas) == (display == "summarized")
    assert deltas.count("signature_delta") == 1
    turn = fold(events)
    block = turn["content"][0]
    assert block["type"] == "thinking" and block["thinking"] == ("Oslo needs a lookup." if display == "summarized" else "")
    assert block["signature"]

    server.upstream.push(text_exchange("It is cold."))
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": turn["content"]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": turn["content"][1]["id"],
                                             "content": "-3C"}]}]  # fmt: skip
    assert create(server.url, body(tools=TOOLS, thinking=thinking, messages=history)).status_code == 200
    assistant = server.upstream.requests[-1]["messages"][1]
    assert assistant["reasoning_content"] == "Oslo needs a lookup."
    assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert server.upstream.requests[-1]["reasoning_effort"] == "medium" or "chat_template_kwargs" in \
        server.upstream.requests[-1]  # fmt: skip


@pytest.mark.parametrize("signature", ["c2lnbmF0dXJlLWJsb2I=", "tampered", ""])
def test_a_foreign_or_tampered_signature_is_skipped(server, signature, caplog):
    if signature == "tampered":
        server.upstream.push(text_exchange("x", reasoning="secret"))
        sealed = create(server.url, body()).json()["content"][0]["signature"]
        signature = sealed[:-6] + ("AAAAAA" if not sealed.endswith("AAAAAA") else "BBBBBB")
    server.upstream.push(text_exchange("Go on."))
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": [{"type": "thinking", "thinking": "forged", "signature": signature},
                                                 {"type": "redacted_thinking", "data": "opaque"},
                                                 {"type": "text", "text": "Hello."}]},
               {"role": "user", "content": "more"}]  # fmt: skip
    answer = create(server.url, body(messages=history))
    assert answer.status_code == 200
    assistant = server.upstream.requests[-1]["messages"][1]
    assert assistant == {"role": "assistant", "content": "Hello."}, "no reasoning from a block that does not open"
    assert "signature is not this server's" in caplog.text


# --- parameters --------------------------------------------------------------------------------


def test_the_request_reaches_the_engine_translated(server):
    server.upstream.push(text_exchange("ok"))
    png = base64.b64encode(b"\x89PNG fake").decode()
    pdf = base64.b64encode(pdf_with_text("Quarterly revenue rose")).decode()
    messages = [
        {"role": "user", "content": [
            {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain doc"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}},
            {"type": "mystery_block", "x": 1},
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "calling"},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Rome"}},
                                          {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": "timeout"}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "tool_reference",
                                                                          "tool_name": "later"}]},
            {"type": "text", "text": "and now?"}]},
        {"role": "system", "content": "Be brief."},
    ]  # fmt: skip
    tools = [*TOOLS, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
             {"name": "later", "input_schema": {"type": "object"}, "defer_loading": True}]  # fmt: skip
    request = body(messages=messages, system=[{"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}],
                   tools=tools, tool_choice={"type": "any", "disable_parallel_tool_use": True}, temperature=0.2,
                   top_p=0.9, top_k=40, metadata={"user_id": "u1"}, max_tokens=321,
                   context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})  # fmt: skip
    answer = create(server.url, request, params={"beta": "true"},
                    headers={"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    sent = server.upstream.requests[-1]
    assert sent["messages"][0] == {"role": "system", "content": "You help.\nBe brief."}
    user = sent["messages"][1]["content"]
    assert user[0] == {"type": "text", "text": "look"}
    assert user[1]["image_url"]["url"] == f"data:image/png;base64,{png}"
    assert user[2]["image_url"]["url"] == "https://example.com/a.png"
    assert user[3] == {"type": "text", "text": "plain doc"} and "Quarterly revenue rose" in user[4]["text"]
    assert len(user) == 5, "the odd block is skipped"
    assert sent["messages"][2] == {"role": "assistant", "content": "calling", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]}
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: timeout"}
    assert sent["messages"][4] == {"role": "tool", "tool_call_id": "toolu_2", "content": "Tool later is now available."}
    assert sent["messages"][5] == {"role": "user", "content": "and now?"}
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["get_weather", "later"], "server tools left out"
    assert sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is False
    assert sent["temperature"] == 0.2 and sent["top_p"] == 0.9 and sent["max_tokens"] == 321
    assert "stop" not in sent


def test_stop_sequences_and_max_tokens(server):
    server.upstream.push(text_exchange("Count: one two STOP three four", pieces=2))
    events = stream(server.url, body(stop_sequences=["STOP", "never"]))
    message = fold(events)
    assert message["content"] == [{"type": "text", "text": "Count: one two "}]
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == "STOP"
    assert "stop" not in server.upstream.requests[-1], "found here, so the answer says which"

    server.upstream.push(text_exchange("no stop here"))
    message = create(server.url, body(stop_sequences=["STOP"])).json()
    assert message["content"][0]["text"] == "no stop here" and message["stop_reason"] == "end_turn"

    server.upstream.push(exchange("llamacpp_length"))
    message = create(server.url, body(max_tokens=64000)).json()
    assert message["stop_reason"] == "max_tokens" and server.upstream.requests[-1]["max_tokens"] == 64000
    Message.model_validate(message, strict=True)


def test_pings_while_the_engine_is_silent(server, monkeypatch):
    monkeypatch.setattr(api_streaming, "HEARTBEAT_SECONDS", 0.2)
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(3, 0.7))
    events = stream(server.url, body())
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"], "one ping right away, as Anthropic sends"
    assert kinds.count("ping") >= 3 and fold(events)["content"][0]["text"] == "xxx"


# --- errors ----------------------------------------------------------------------------------


def anthropic_error(answer: httpx.Response, status: int, kind: str) -> str:
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == kind and set(error["error"]) == {"type", "message"}
    if kind != "request_too_large":
        ErrorResponse.model_validate(error, strict=True)
    return error["error"]["message"]


def test_errors_before_the_stream(server):
    missing = create(server.url, {"model": "test-model", "messages": [{"role": "user", "content": "x"}]})
    assert "max_tokens" in anthropic_error(missing, 400, "invalid_request_error")
    anthropic_error(create(server.url, body(temperature=3)), 400, "invalid_request_error")
    anthropic_error(create(server.url, body(tool_choice={"type": "tool", "name": "nope"})), 400, "invalid_request_error")
    anthropic_error(httpx.post(f"{server.url}/v1/messages", content=b"{nope"), 400, "invalid_request_error")
    anthropic_error(create(server.url, body(model="unknown-model")), 404, "not_found_error")
    anthropic_error(httpx.get(f"{server.url}/v1/messages/nothing"), 404, "not_found_error")
    anthropic_error(httpx.post(f"{server.url}/v1/messages/count_tokens", json={"model": "m"}), 400,
                    "invalid_request_error")  # fmt: skip
    for name, status, kind in [("openai_rate_limited", 429, "rate_limit_error"),
                               ("llamacpp_context_overflow", 400, "invalid_request_error")]:  # fmt: skip
        server.upstream.push(exchange(name))
        message = anthropic_error(create(server.url, body()), status, kind)
        if name == "llamacpp_context_overflow":
            assert message.startswith("prompt is too long"), "what Claude Code compacts on"
    # The other APIs keep OpenAI's envelope.
    assert httpx.post(f"{server.base_url}/chat/completions", json={}).json()["error"]["param"] == "model"
    with pytest.raises(anthropic.NotFoundError):
        client(server.url).messages.create(model="unknown-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])


def test_every_status_has_anthropics_type():
    assert {status: error_type(status) for status in (400, 401, 403, 404, 413, 429, 500, 502, 529)} == {
        400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
        413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 502: "api_error",
        529: "overloaded_error"}  # fmt: skip


def test_keys_and_size_limits(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        api_keys=["sk-right"], max_body_bytes=4096)  # fmt: skip
    with serve(create_app(settings)) as url:
        request = body()
        anthropic_error(httpx.post(f"{url}/v1/messages", json=request), 401, "authentication_error")
        anthropic_error(httpx.post(f"{url}/v1/messages", json=request, headers={"x-api-key": "wrong"}), 401,
                        "authentication_error")  # fmt: skip
        upstream.push(text_exchange("a"), text_exchange("b"))
        assert httpx.post(f"{url}/v1/messages", json=request, headers={"x-api-key": "sk-right"}).status_code == 200
        assert httpx.post(f"{url}/v1/messages", json=request,
                          headers={"authorization": "Bearer sk-right"}).status_code == 200  # fmt: skip
        big = body(messages=[{"role": "user", "content": "x" * 5000}])
        anthropic_error(httpx.post(f"{url}/v1/messages", json=big, headers={"x-api-key": "sk-right"}), 413,
                        "request_too_large")  # fmt: skip
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(
                model="test-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])


def test_an_engine_error_inside_the_stream(server):
    server.upstream.push(exchange("llamacpp_error_midstream"))
    events = stream(server.url, body())
    assert events[-1]["type"] == "error" and events[-1]["error"]["type"] == "api_error"
    assert events[-1]["error"]["message"] == "Failed to decode the batch: KV cache is full"


@pytest.fixture
def faulty(upstream, database_url, unused_port):
    upstream.time_scale = 1.0
    settings = Settings(upstreams=_upstreams(upstream, unused_port), probe=False, database_url=database_url)
    with serve(create_app(settings)) as url:
        yield url, upstream


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_engine_fault_ends_the_stream(faulty, fault):
    url, upstream = faulty
    script, status, _, http_status = FAULTS[fault]
    model = "dead-model" if script is None else "test-model"
    for streaming in (True, False):
        if script is not None:
            upstream.push(json.loads(json.dumps(script)))
        request = body(model=model, tools=TOOLS)
        if streaming:
            events = stream(url, request)
            assert events[-1]["type"] == ("error" if status == "failed" else "message_stop"), fault
        else:
            answer = create(url, request)
            assert answer.status_code == http_status, fault
            if status == "failed":
                anthropic_error(answer, http_status, error_type(http_status))
            else:
                Message.model_validate(answer.json(), strict=True)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
BLOCK = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
                             "search_result", "server_tool_use", "nonsense"]),
    "text": JSON, "source": JSON, "id": JSON, "name": JSON, "input": JSON, "tool_use_id": JSON, "content": JSON,
    "is_error": JSON, "thinking": JSON, "signature": JSON, "data": JSON, "cache_control": JSON})  # fmt: skip
MESSAGE = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["user", "assistant", "system", "developer", "tool", 3]),
    "content": st.one_of(st.text(max_size=20), st.lists(st.one_of(BLOCK, JSON), max_size=4), JSON)})  # fmt: skip
BODY = st.fixed_dictionaries(
    {"model": st.sampled_from(["test-model", "claude-sonnet-4-5", "", 7])},
    optional={"messages": st.one_of(st.lists(st.one_of(MESSAGE, JSON), max_size=5), JSON),
              "max_tokens": st.one_of(st.integers(min_value=-2, max_value=10**12), JSON),
              "system": st.one_of(st.text(max_size=20), st.lists(st.one_of(BLOCK, JSON), max_size=3), JSON),
              "tools": st.one_of(st.lists(st.one_of(JSON, st.fixed_dictionaries({"name": JSON}, optional={
                  "input_schema": JSON, "type": st.sampled_from(["custom", "web_search_20250305", "bash_20250124"]),
                  "defer_loading": JSON})), max_size=3), JSON),
              "tool_choice": JSON, "thinking": st.one_of(JSON, st.fixed_dictionaries(
                  {"type": st.sampled_from(["enabled", "adaptive", "disabled", "other"])},
                  optional={"budget_tokens": JSON, "display": JSON})),
              "temperature": JSON, "top_p": JSON, "top_k": JSON, "stop_sequences": JSON, "metadata": JSON,
              "output_config": JSON, "context_management": JSON},
)  # fmt: skip


def test_generated_bodies_never_get_a_5xx(server):
    server.upstream.responder = lambda request: text_exchange("ok")
    http = httpx.Client(base_url=server.url, timeout=30)

    @hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(BODY, st.booleans(), st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"]))
    def check(request: dict, streaming: bool, path: str) -> None:
        answer = http.post(path, json={**request, "stream": streaming})
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            error = answer.json()
            assert error["type"] == "error" and set(error["error"]) == {"type", "message"}

    check()
    assert http.get("/v1/models").status_code == 200, "the server is still up"


# --- counting tokens -----------------------------------------------------------------------------


def test_count_tokens_is_exact_on_an_in_process_model(engine_server):
    model = engine_server.app.state.router.engines[0].model
    request = {"model": model, "system": "Be brief.", "messages": [{"role": "user", "content": "Name three colors."}],
               "tools": TOOLS}  # fmt: skip
    answer = httpx.post(f"{engine_server.url}/v1/messages/count_tokens", json=request, headers=HEADERS, timeout=60)
    assert answer.status_code == 200 and "estimated" not in answer.json()
    count = MessageTokensCount.model_validate(answer.json(), strict=True).input_tokens
    responses = httpx.post(f"{engine_server.base_url}/responses/input_tokens", timeout=60, json={
        "model": model, "instructions": "Be brief.", "input": "Name three colors.",
        "tools": [{"type": "function", "name": "get_weather", "description": "The weather",
                   "parameters": TOOLS[0]["input_schema"]}]}).json()  # fmt: skip
    assert count == responses["input_tokens"] and not responses["estimated"]
    events = stream(engine_server.url, {**request, "max_tokens": 5})
    assert events[0]["message"]["usage"]["input_tokens"] == count, "message_start carries the real count"


def test_max_tokens_beyond_the_context_is_clamped(engine_server, caplog):
    caplog.set_level(logging.INFO, logger="responsekit.orchestration.pipeline")
    model = engine_server.app.state.router.engines[0].model
    request = {"model": model, "max_tokens": 64000, "messages": [{"role": "user", "content": "Hi"}]}
    answer = httpx.post(f"{engine_server.url}/v1/messages", json=request, headers=HEADERS, timeout=120)
    assert answer.status_code == 200
    Message.model_validate(answer.json(), strict=True)
    limit = int(answer.headers["x-responsekit-max-tokens-clamped"])
    assert 0 < limit < 4096 and "clamped" in caplog.text


def test_count_tokens_elsewhere(server):
    request = {"model": "test-model", "messages": [{"role": "user", "content": "one two three"}]}
    exact = httpx.post(f"{server.url}/v1/messages/count_tokens", json=request, headers=HEADERS).json()
    # llama.cpp's /apply-template then /tokenize; the scripted engine's template and its one token a word
    # make "<|user|> one two three <|assistant|>" five.
    assert exact == {"input_tokens": 5}


def test_count_tokens_is_marked_estimated_when_the_engine_cannot_count(database_url):
    engine = ScriptedUpstream(owned_by="somebody")
    with serve(engine.app) as engine_url:
        settings = Settings(upstreams=[UpstreamConfig(base_url=f"{engine_url}/v1")], probe=False,
                            database_url=database_url)  # fmt: skip
        with serve(create_app(settings)) as url:
            request = {"model": "test-model", "messages": [{"role": "user", "content": "one two three"}]}
            answer = httpx.post(f"{url}/v1/messages/count_tokens", json=request, headers=HEADERS).json()
    assert answer["estimated"] is True and answer["input_tokens"] > 0


# --- Claude Code ---------------------------------------------------------------------------------


def claude_code_requests() -> list[dict[str, Any]]:
    """The two requests Claude Code 2.1 sent in one tool loop (tests/data/claude_code_requests.json)."""
    return json.loads((DATA / "claude_code_requests.json").read_text())["exchanges"]


@pytest.fixture
def claude_server(upstream, database_url):
    """A server mapping Claude Code's model names onto the scripted engine's model."""
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        aliases={"claude-sonnet-4-5": "test-model"})  # fmt: skip
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


def test_claude_codes_requests(claude_server):
    server = claude_server
    sent = []
    for recorded in claude_code_requests():
        server.upstream.push(tool_call_exchange("Bash", {"command": "cat out.txt"}, reasoning="Check the file."))
        headers = {key: value for key, value in recorded["headers"].items() if key.lower() not in
                   ("content-length", "accept-encoding", "connection", "host")}  # fmt: skip
        with httpx.stream("POST", f"{server.url}{recorded['path']}", json=recorded["body"], headers=headers) as answer:
            assert answer.status_code == 200
            events, _ = read_sse(answer.iter_lines())
        check_events(events)
        assert fold(events)["stop_reason"] == "tool_use"
        sent.append(server.upstream.requests[-1])
    first, second = sent
    system = first["messages"][0]
    assert system["role"] == "system" and "x-anthropic-billing-header" not in system["content"]
    assert system["content"].startswith("You are a Claude agent")
    names = [tool["function"]["name"] for tool in first["tools"]]
    assert len(names) == 11 and "DeferredToolPlaceholder" not in names, "the deferred tool withheld"
    assert first["max_tokens"] == 32000 and first["messages"][1]["role"] == "user"
    assert first["messages"][1]["content"].endswith("Write hi into out.txt")
    assistant, result = second["messages"][2], second["messages"][3]
    assert "reasoning_content" not in assistant, "another server's signature does not open"
    assert assistant["tool_calls"][0]["function"]["name"] == "Bash"
    assert result["role"] == "tool" and result["tool_call_id"] == "toolu_01" and result["content"].startswith("hi\n")


def test_two_turns_send_the_engine_identical_prefixes(claude_server):
    """The billing line changes every request; left out, the engine's prefix cache holds."""
    server = claude_server
    first, second = (copy.deepcopy(recorded["body"]) for recorded in claude_code_requests())
    first["system"][0]["text"] = "x-anthropic-billing-header: cc_version=2.1.328.6cf; cch=11111;"
    second["system"][0]["text"] = "x-anthropic-billing-header: cc_version=2.1.328.6cf; cch=22222;"
    server.upstream.push(tool_call_exchange("Bash", {"command": "echo hi"}, reasoning="Run it."))
    turn = fold(stream(server.url, first))
    second["messages"][1]["content"] = turn["content"]  # the assistant turn as this server answered it
    second["messages"][2]["content"][0]["tool_use_id"] = turn["content"][1]["id"]
    server.upstream.push(text_exchange("Done."))
    stream(server.url, second)
    one, two = (request["messages"] for request in server.upstream.requests[-2:])
    assert two[: len(one)] == one, "the first turn's prompt is a prefix of the second's"
    assert two[len(one)]["reasoning_content"] == "Run it."


def test_the_billing_line_is_kept_when_configured_so(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        strip_billing_header=False)  # fmt: skip
    with serve(create_app(settings)) as url:
        upstream.push(text_exchange("ok"))
        request = body(system=[{"type": "text", "text": "x-anthropic-billing-header: cch=1;"},
                               {"type": "text", "text": "Rules."}])  # fmt: skip
        assert create(url, request).status_code == 200
    assert upstream.requests[-1]["messages"][0]["content"].startswith("x-anthropic-billing-header: cch=1;")


def test_a_base_url_with_v1_and_anthropic_model_discovery(server):
    server.upstream.push(text_exchange("doubled"))
    message = client(f"{server.url}/v1").messages.create(model="test-model", max_tokens=10,
                                                         messages=[{"role": "user", "content": "x"}])  # fmt: skip
    assert message.content[0].text == "doubled", "POST /v1/v1/messages"
    for path in ("/v1/models", "/v1/v1/models"):
        page = httpx.get(f"{server.url}{path}", headers=HEADERS).json()
        assert page["has_more"] is False and page["first_id"] == page["last_id"] == "test-model"
        for model in page["data"]:
            ModelInfo.model_validate(model)
    assert httpx.get(f"{server.url}/v1/models").json()["object"] == "list", "OpenAI's shape otherwise"
    assert [model.id for model in client(server.url).models.list()] == ["test-model"]


def test_the_paths_the_protocols_share_answer_each_client_in_its_own_shapes(server):
    """`/v1/models/{id}` and `/v1/files` serve OpenAI's, Anthropic's and Google's clients: each
    gets its own object, and its own error envelope, which its SDK reads."""
    ModelInfo.model_validate(client(server.url).models.retrieve("test-model").model_dump(), strict=True)
    with pytest.raises(anthropic.NotFoundError) as unknown_model:
        client(server.url).models.retrieve("no-such-model")
    with pytest.raises(anthropic.NotFoundError) as unknown_file:
        client(server.url).beta.files.retrieve_metadata("file_unknown")
    with pytest.raises(anthropic.BadRequestError) as bad_limit:
        client(server.url).beta.files.list(limit=5000)
    for error, kind in ((unknown_model, "not_found_error"), (unknown_file, "not_found_error"),
                        (bad_limit, "invalid_request_error")):  # fmt: skip
        assert ErrorResponse.model_validate(error.value.body, strict=True).error.type == kind
    with pytest.raises(openai.NotFoundError) as openai_unknown:
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0).models.retrieve("no-such-model")
    assert isinstance(openai_unknown.value.body, dict)
    assert openai_unknown.value.type == "invalid_request_error" and "no-such-model" in openai_unknown.value.message
    google = httpx.get(f"{server.url}/v1/models/no-such-model", headers={"x-goog-api-key": "test"})
    assert google.status_code == 404 and google.json()["error"]["status"] == "NOT_FOUND"


def test_claude_model_names_resolve_through_aliases(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        aliases={"claude-sonnet-4-5": "test-model"}, default_model="test-model")  # fmt: skip
    with serve(create_app(settings)) as url:
        upstream.push(text_exchange("aliased"), text_exchange("defaulted"))
        for name, text in (("claude-sonnet-4-5", "aliased"), ("claude-haiku-4-5", "defaulted")):
            message = create(url, body(model=name)).json()
            assert message["model"] == name and message["content"][0]["text"] == text
    assert [request["model"] for request in upstream.requests] == ["test-model", "test-model"]

