"""Upstreams that return unparsed text: `parser`, `reasoning_mode` and `thinking_open`
per upstream and per model turn raw markers in `content` into reasoning, text and
tool calls, on `/v1/responses` (streaming and not) and `/v1/chat/completions`."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from responsekit.backends.chat_upstream import ChunkTranslator, OutputParsing
from responsekit.canonical.conversation import FunctionTool, GenerationRequest, Message, TextPart
from responsekit.canonical.events import (
    Error,
    Finish,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from responsekit.config import Settings, UpstreamConfig, load_settings
from responsekit.parsing import get_parser

from .harness import check_chat_chunk, check_chat_completion, check_response, check_stream, read_sse

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
}
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k not in ("type", "strict")}}

# Raw Qwen3-Coder output as an engine without a tool-call parser streams it: markers
# split across chunks, `days` typed from the schema.
QWEN_PIECES = [
    "<think>\nThe user wants the weather.",
    "\n</th",
    "ink>\n\nLet me check.\n\n<tool",
    "_call>\n<func",
    "tion=get_wea",
    "ther>\n<parameter=ci",
    "ty>\nPa",
    "ris\n</para",
    "meter>\n<parameter=days>\n",
    "3\n</parameter>\n</function>\n</tool_",
    "call>",
]
HERMES_PIECES = [
    "<th",
    "ink>Weather, so a call.</think>\n<tool_",
    'call>\n{"name": "get_weather", "argu',
    'ments": {"city": "Paris </tool_call> Nord", "days": -2}}\n</tool',
    "_call>",
]


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}  # fmt: skip


def raw_exchange(pieces: Sequence[str], *, reasoning: Sequence[str] = (), finish: str = "stop") -> dict[str, Any]:
    """An engine streaming `pieces` as `content` (after native `reasoning` pieces) and
    saying `finish` — llama.cpp without `--jinja` says `stop` even after a call."""
    chunks: list[Any] = [chunk({"role": "assistant", "content": None})]
    chunks += [chunk({"reasoning_content": piece}) for piece in reasoning]
    chunks += [chunk({"content": piece}) for piece in pieces]
    chunks.append(chunk({}, finish, usage={"prompt_tokens": 20, "completion_tokens": 30, "total_tokens": 50}))
    chunks.append("[DONE]")
    return {"status": 200, "chunks": [{"t": 0, "data": data} for data in chunks]}


@pytest.fixture
def upstream_options() -> dict[str, Any]:
    return {"parser": "qwen3_coder_xml"}


@pytest.fixture
def settings(upstream, database_url: str, tmp_path: Path, upstream_options: dict[str, Any]) -> Settings:
    config = UpstreamConfig(name="scripted", base_url=upstream.url, **upstream_options)
    return Settings(upstreams=[config], probe=False, data_dir=tmp_path, database_url=database_url)


def responses_stream(server, body: dict[str, Any]) -> dict[str, Any]:
    with httpx.stream("POST", f"{server.base_url}/responses", json={**body, "stream": True}, timeout=30) as r:
        assert r.status_code == 200
        events, done = read_sse(r.iter_lines())
    assert done
    response = check_stream(events)
    response["events"] = events
    return response


def responses_once(server, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{server.base_url}/responses", json=body, timeout=30)
    assert answer.status_code == 200
    check_response(answer.json())
    return answer.json()


def chat(server, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """The assistant message (content, reasoning_content, tool_calls) and finish reason."""
    if not stream:
        answer = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
        assert answer.status_code == 200
        check_chat_completion(answer.json())
        choice = answer.json()["choices"][0]
        calls = [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in choice["message"].get("tool_calls") or ()
        ]
        message = choice["message"]
        return {"content": message.get("content") or "", "reasoning": message.get("reasoning_content") or "",
                "calls": calls, "finish": choice["finish_reason"]}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json={**body, "stream": True}, timeout=30) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    folded: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}, "finish": None}
    for data in lines[:-1]:
        payload = json.loads(data)
        check_chat_chunk(payload)
        for choice in payload["choices"]:
            delta = choice["delta"]
            folded["content"] += delta.get("content") or ""
            folded["reasoning"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or ():
                slot = folded["calls"].setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += (call.get("function") or {}).get("name") or ""
                slot["arguments"] += (call.get("function") or {}).get("arguments") or ""
            folded["finish"] = choice["finish_reason"] or folded["finish"]
    folded["calls"] = [folded["calls"][index] for index in sorted(folded["calls"])]
    return folded


def summary(response: dict[str, Any]) -> tuple[str, str, list[tuple[str, Any]]]:
    """(reasoning, text, [(name, arguments)]) of a Response."""
    reasoning = "".join(
        part["text"] for item in response["output"] if item["type"] == "reasoning" for part in item["content"]
    )
    text = "".join(
        part["text"] for item in response["output"] if item["type"] == "message" for part in item["content"]
    )
    calls = [(i["name"], json.loads(i["arguments"])) for i in response["output"] if i["type"] == "function_call"]
    return reasoning, text, calls


QWEN_RESULT = ("The user wants the weather.", "Let me check.", [("get_weather", {"city": "Paris", "days": 3})])


def test_responses_stream_yields_function_calls(server):
    server.upstream.push(raw_exchange(QWEN_PIECES))
    response = responses_stream(server, {"model": "test-model", "input": "Weather in Paris?", "tools": [WEATHER]})
    assert response["status"] == "completed"
    assert summary(response) == QWEN_RESULT
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "function_call"]
    deltas = [e["delta"] for e in response["events"] if e["type"] == "response.function_call_arguments.delta"]
    assert len(deltas) > 1, "the arguments stream as the chunks arrive"
    assert "".join(deltas) == response["output"][2]["arguments"]
    assert "<" not in json.dumps(response["output"]), "no raw marker reaches the client"


def test_responses_without_stream_fold_the_same(server):
    server.upstream.push(raw_exchange(QWEN_PIECES))
    response = responses_once(server, {"model": "test-model", "input": "Weather in Paris?", "tools": [WEATHER]})
    assert summary(response) == QWEN_RESULT
    assert response["output"][2]["call_id"].startswith("call_")


@pytest.mark.parametrize("stream", [True, False])
def test_chat_completions_get_tool_calls(server, stream):
    server.upstream.push(raw_exchange(QWEN_PIECES))
    body = {"model": "test-model", "messages": [{"role": "user", "content": "Weather?"}], "tools": [CHAT_WEATHER]}
    message = chat(server, body, stream=stream)
    assert message["reasoning"] == "The user wants the weather."
    assert message["content"] == "Let me check."
    assert [(c["name"], json.loads(c["arguments"])) for c in message["calls"]] == QWEN_RESULT[2]
    assert message["finish"] == "tool_calls"
    sent = server.upstream.requests[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather", "the engine still gets the tools"


@pytest.mark.parametrize(
    ("upstream_options", "expected"),
    [
        ({"parser": "qwen3_coder_xml"}, ("The user wants the weather.", "Let me check.")),
        (
            {"parser": "qwen3_coder_xml", "reasoning_mode": "inline"},
            ("", "<think>\nThe user wants the weather.\n</think>\n\nLet me check."),
        ),
        ({"parser": "qwen3_coder_xml", "reasoning_mode": "none"}, ("", "Let me check.")),
    ],
)
def test_reasoning_modes(server, upstream_options, expected):
    server.upstream.push(raw_exchange(QWEN_PIECES), raw_exchange(QWEN_PIECES))
    body = {"model": "test-model", "input": "Weather in Paris?", "tools": [WEATHER]}
    response = responses_stream(server, body)
    assert summary(response) == (*expected, QWEN_RESULT[2])
    chat_body = {"model": "test-model", "messages": [{"role": "user", "content": "?"}], "tools": [CHAT_WEATHER]}
    message = chat(server, chat_body, stream=True)
    assert (message["reasoning"], message["content"]) == expected


@pytest.mark.parametrize("upstream_options", [{"reasoning_mode": "inline"}, {"reasoning_mode": "none"}])
def test_reasoning_mode_applies_to_native_reasoning(server, upstream_options):
    """No parser: the engine's own `reasoning_content` follows the mode too."""
    server.upstream.push(raw_exchange(["Paris."], reasoning=["Capital of ", "France."]))
    message = chat(server, {"model": "test-model", "messages": [{"role": "user", "content": "?"}]}, stream=True)
    if upstream_options["reasoning_mode"] == "inline":
        assert (message["reasoning"], message["content"]) == ("", "<think>\nCapital of France.\n</think>\n\nParis.")
    else:
        assert (message["reasoning"], message["content"]) == ("", "Paris.")
    assert message["finish"] == "stop"


AUTO = {
    "parser": "auto",
    "models": ["Qwen3-Coder-30B-A3B-Instruct", "Qwen3-8B", "mystery-model", "test-model"],
    "parsers": {"test-model": "none"},
}


@pytest.mark.parametrize("upstream_options", [AUTO])
def test_auto_detects_from_the_model_name(server, upstream_options):
    server.upstream.push(raw_exchange(QWEN_PIECES), raw_exchange(HERMES_PIECES))
    server.upstream.push(raw_exchange(["<tool_call>raw</tool_call>"]), raw_exchange(["<tool_call>x"]))
    body = {"input": "Weather?", "tools": [WEATHER]}
    assert summary(responses_once(server, {**body, "model": "Qwen3-Coder-30B-A3B-Instruct"})) == QWEN_RESULT
    hermes = responses_once(server, {**body, "model": "Qwen3-8B"})
    assert summary(hermes) == (
        "Weather, so a call.", "", [("get_weather", {"city": "Paris </tool_call> Nord", "days": -2})]
    )
    for model, text in (("mystery-model", "<tool_call>raw</tool_call>"), ("test-model", "<tool_call>x")):
        assert summary(responses_once(server, {**body, "model": model})) == ("", text, []), model


@pytest.mark.parametrize("upstream_options", [{"parser": "template", "models": ["Qwen3-8B"]}])
def test_parser_template_on_a_chat_upstream_detects_from_the_model_name(server, upstream_options, caplog):
    """A chat upstream keeps its template to itself: `template` says so in the log
    and reads the output as `auto` does."""
    server.upstream.push(raw_exchange(HERMES_PIECES))
    with caplog.at_level(logging.WARNING, "responsekit.backends.chat_upstream"):
        hermes = responses_once(server, {"input": "Weather?", "tools": [WEATHER], "model": "Qwen3-8B"})
    assert summary(hermes)[2] == [("get_weather", {"city": "Paris </tool_call> Nord", "days": -2})]
    assert "needs the model's chat template" in caplog.text


@pytest.mark.parametrize("upstream_options", [{"parser": "hermes_json"}])
def test_hermes_think_then_call(server, upstream_options):
    server.upstream.push(raw_exchange(HERMES_PIECES))
    response = responses_stream(server, {"model": "test-model", "input": "Weather?", "tools": [WEATHER]})
    assert summary(response) == (
        "Weather, so a call.", "", [("get_weather", {"city": "Paris </tool_call> Nord", "days": -2})]
    )
    assert [item["type"] for item in response["output"]] == ["reasoning", "function_call"]


R1_OPEN = {
    "parsers": {"test-model": {"parser": "deepseek_r1", "thinking_open": True, "reasoning_mode": "separate"}},
    "reasoning_mode": "none",
}


@pytest.mark.parametrize("upstream_options", [R1_OPEN])
def test_thinking_open_per_model(server, upstream_options):
    """DeepSeek-R1's template opens `<think>` itself: the output starts inside reasoning."""
    server.upstream.push(raw_exchange(["Paris is the ", "capital.\n</thi", "nk>\n\nParis.<｜end▁of▁sentence｜>"]))
    response = responses_stream(server, {"model": "test-model", "input": "Capital of France?"})
    assert summary(response) == ("Paris is the capital.", "Paris.", [])


def test_length_keeps_the_parsed_call_and_its_reason(server):
    server.upstream.push(raw_exchange(QWEN_PIECES[:7], finish="length"))
    response = responses_stream(server, {"model": "test-model", "input": "Weather?", "tools": [WEATHER]})
    assert response["status"] == "incomplete"
    (call,) = [item for item in response["output"] if item["type"] == "function_call"]
    assert json.loads(call["arguments"]) == {"city": "Pa"}, "a cut call is closed with valid arguments"


def test_native_and_parsed_calls_never_share_an_index():
    request = GenerationRequest(
        model="m",
        messages=[Message(role="user", content=[TextPart("hi")])],
        tools=[FunctionTool(name="get_weather", parameters=WEATHER["parameters"])],
    )
    translator = ChunkTranslator(request, OutputParsing(parser=get_parser("hermes_json")))
    native = {"index": 0, "id": "native-1", "function": {"name": "get_weather", "arguments": '{"city": "A"}'}}
    events = translator.feed(chunk({"tool_calls": [native]}))
    events += translator.feed(chunk({"content": 'Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "B"}}'}))
    events += translator.feed(chunk({"content": "</tool_call>"}, "tool_calls"))
    events += translator.finish()
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.id == "native-1") for s in starts] == [(0, True), (1, False)]
    arguments: dict[int, str] = {0: "", 1: ""}
    for event in events:
        if isinstance(event, ToolCallDelta):
            arguments[event.index] += event.arguments
    assert {i: json.loads(a)["city"] for i, a in arguments.items()} == {0: "A", 1: "B"}
    assert sorted(e.index for e in events if isinstance(e, ToolCallEnd)) == [0, 1]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Sure."]


def test_toml_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The configuration shape docs/configuration.md documents."""
    monkeypatch.delenv("RESPONSEKIT_UPSTREAMS", raising=False)
    config = tmp_path / "responsekit.toml"
    config.write_text(
        "[[upstreams]]\n"
        'base_url = "http://127.0.0.1:8000/v1"\n'
        'parser = "auto"\n'
        'reasoning_mode = "inline"\n'
        "\n"
        "[upstreams.parsers]\n"
        '"qwen3-coder" = "qwen3_coder_xml"\n'
        '"gpt-4.1" = "none"\n'
        '"deepseek-r1" = { parser = "deepseek_r1", thinking_open = true }\n'
    )
    (upstream,) = load_settings(config).upstreams
    assert upstream.parsing("qwen3-coder").parser == "qwen3_coder_xml"
    assert upstream.parsing("gpt-4.1").parser is None
    assert upstream.parsing("other").parser == "auto"
    r1 = upstream.parsing("deepseek-r1")
    assert (r1.parser, r1.thinking_open, r1.reasoning_mode) == ("deepseek_r1", True, "inline")
    config.write_text('[[upstreams]]\nbase_url = "http://x/v1"\nparser = "qwen3_xml"\n')
    with pytest.raises(ValueError, match="unknown parser format 'qwen3_xml'; known formats: .*qwen3_coder_xml"):
        load_settings(config)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["choices", "delta", "message", "content", "reasoning_content", "tool_calls", "index", "id",
                         "function", "name", "arguments", "finish_reason", "usage", "prompt_tokens",
                         "completion_tokens_details", "refusal", "error", "code", "x"]),
        children, max_size=4),
    max_leaves=12,
)  # fmt: skip
"""JSON values shaped like chat chunks often enough to reach every branch, wrong everywhere else."""


@hypothesis_settings(max_examples=400, deadline=None)
@given(chunks=st.lists(_JSON, min_size=1, max_size=4), parsed=st.booleans())
def test_any_json_from_an_engine_becomes_events_or_an_error_never_an_exception(chunks: list[Any], parsed: bool) -> None:
    request = GenerationRequest(model="m", messages=[Message("user", [TextPart("x")])],
                                tools=[FunctionTool("get_weather", None, WEATHER["parameters"])])  # fmt: skip
    translator = ChunkTranslator(request, OutputParsing(parser=get_parser("hermes_json") if parsed else None))
    for chunk in chunks:
        events = translator.feed_data(json.dumps(chunk))
        if events and isinstance(events[-1], Error):
            return
    assert isinstance(translator.finish()[-1], (Finish, Error))
