"""Mistral v3, Llama 3 (JSON and builtin), Functionary v3.1/v3.2, FireFunction v2,
Command-R7B and Granite 3 beyond the corpus: ids, leniency, raw code, truncation."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.canonical.events import Event, TextDelta, ToolCallDelta, ToolCallStart
from responsekit.parsing import get_parser
from responsekit.parsing.detect import model_format

from .parsing_support import Folded, check_soup, run
from .test_fuzz import COMMON, TOOLS


def _tool(name: str, **properties: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": name, "parameters": params}}


WEATHER = [
    _tool("get_weather", city={"type": "string"}, days={"type": "integer"}),
    _tool("get_time", timezone={"type": "string"}),
]


def parse(fmt: str, raw: str, *, tools: Any = WEATHER, thinking_open: bool = False) -> Folded:
    """Parse one-shot, per character and in 3-char pieces; all three must agree."""
    results = []
    for chunks in ([raw], list(raw), [raw[i : i + 3] for i in range(0, len(raw), 3)]):
        parser = get_parser(fmt)(tools, thinking_open=thinking_open)
        results.append(run(parser, chunks))
    keep_ids = all(c.id == d.id for c, d in zip(results[0].calls, results[1].calls, strict=False))
    assert (
        results[0].comparable(keep_ids)
        == results[1].comparable(keep_ids)
        == results[2].comparable(keep_ids)
    )
    for call in results[0].calls:
        assert call.ended
    return results[0]


def args(result: Folded) -> list[Any]:
    return [json.loads(c.arguments) for c in result.calls]


def calls(result: Folded) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


def feed_each(fmt: str, chunks: list[str], *, tools: Any = WEATHER) -> list[list[Event]]:
    """The events `feed()` returns for each chunk (no `finish()`)."""
    parser = get_parser(fmt)(tools)
    return [parser.feed(chunk) for chunk in chunks]


# --- mistral_json_array ---------------------------------------------------------------


def test_mistral_ids_written_after_the_arguments_are_kept() -> None:
    raw = (
        'Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, '
        '"id": "a1B2c3D4e"}, {"id": "Zx9Yw8Vu7", "name": "get_time", "arguments": {}}]</s>'
    )
    r = parse("mistral_json_array", raw)
    assert r.content == "Checking."
    assert [(c.id, c.name) for c in r.calls] == [
        ("a1B2c3D4e", "get_weather"),
        ("Zx9Yw8Vu7", "get_time"),
    ]
    assert args(r) == [{"city": "Paris"}, {}]


def test_mistral_arguments_are_held_until_the_id_and_stream_once_it_is_known() -> None:
    head = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Par'
    events = feed_each(
        "mistral_json_array",
        [
            head,
            'is"}, "id": "a1B2c3D4e"',
            '}, {"id": "Zx9Yw8Vu7", "name": "get_time", ',
            '"arguments": {"t',
        ],
    )
    assert events[0] == []  # the id may still follow: nothing is announced yet
    assert events[1] == [
        ToolCallStart(0, "a1B2c3D4e", "get_weather"),
        ToolCallDelta(0, '{"city": "Paris"}'),
    ]
    # An id written before the name: the call starts at once and its arguments stream.
    assert isinstance(events[2][-1], ToolCallStart) and events[2][-1].id == "Zx9Yw8Vu7"
    assert events[3] == [ToolCallDelta(1, "{")]


def test_mistral_generated_ids_are_nine_alphanumerics() -> None:
    raw = '[TOOL_CALLS][{"name": "get_weather", "arguments": {}}, '
    raw += '{"name": "get_time", "arguments": {}}]'
    r = parse("mistral_json_array", raw)
    assert all(re.fullmatch("[A-Za-z0-9]{9}", c.id) for c in r.calls)
    assert len({c.id for c in r.calls}) == 2


def test_mistral_truncated_call_is_announced_and_completed_at_the_end() -> None:
    r = parse(
        "mistral_json_array", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Par'
    )
    assert args(r) == [{"city": "Par"}]
    assert re.fullmatch("[A-Za-z0-9]{9}", r.calls[0].id)


def test_mistral_single_object_and_broken_array() -> None:
    r = parse(
        "mistral_json_array",
        '[TOOL_CALLS]{"name": "get_time", "arguments": {"timezone": "UTC"}} ok',
    )
    assert calls(r) == [("get_time", {"timezone": "UTC"})] and r.content == "ok"
    r = parse("mistral_json_array", '[TOOL_CALLS][{"name": "get_time", "arguments": {}} oops]')
    assert calls(r) == [("get_time", {})] and r.content == "oops]"
    r = parse("mistral_json_array", "[TOOL_CALLS]get_time")
    assert r.calls == [] and r.content == "get_time"


# --- firefunction_v2 --------------------------------------------------------------------


def test_firefunction_content_then_calls_with_or_without_the_space() -> None:
    raw = (
        'Sure. functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": -2}}, '
        '{"name": "get_time", "arguments": {"timezone": "UTC"}}]<|eot_id|>'
    )
    r = parse("firefunction_v2", raw)
    assert r.content == "Sure."
    assert calls(r) == [
        ("get_weather", {"city": "Paris", "days": -2}),
        ("get_time", {"timezone": "UTC"}),
    ]
    r = parse("firefunction_v2", 'functools[{"name": "get_time", "arguments": {}}]')
    assert calls(r) == [("get_time", {})] and r.content == ""


# --- command_r7b ------------------------------------------------------------------------


def test_command_r7b_action_keeps_ids_and_streams_arguments() -> None:
    raw = (
        "<|START_THINKING|>Two cities.<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}},\n'
        '    {"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Tokyo"}}\n'
        "]<|END_ACTION|><|END_OF_TURN_TOKEN|>"
    )
    r = parse("command_r7b", raw)
    assert r.reasoning == "Two cities." and r.content == ""
    assert [(c.id, json.loads(c.arguments)) for c in r.calls] == [
        ("0", {"city": "Paris"}),
        ("1", {"city": "Tokyo"}),
    ]
    head, tail = raw.split("Par")
    first = feed_each("command_r7b", [head, tail])[0]
    assert ToolCallStart(0, "0", "get_weather") in first  # the id came first: no waiting
    assert "".join(e.arguments for e in first if isinstance(e, ToolCallDelta)) == '{"city": "'


def test_command_r7b_thinking_open_is_decided_from_the_prompt() -> None:
    cls = get_parser("command_r7b")
    assert cls.thinking_open_in("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>")
    assert not cls.thinking_open_in("<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>")
    r = parse(
        "command_r7b",
        "Plan.<|END_THINKING|><|START_RESPONSE|>Hi<|END_RESPONSE|>",
        tools=(),
        thinking_open=True,
    )
    assert (r.reasoning, r.content) == ("Plan.", "Hi")


def test_command_r7b_broken_action_is_dropped_up_to_its_end() -> None:
    raw = (
        '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_time", "parameters": {}} junk]'
        "<|END_ACTION|><|START_RESPONSE|>Done.<|END_RESPONSE|>"
    )
    r = parse("command_r7b", raw)
    assert [(c.id, c.name) for c in r.calls] == [("0", "get_time")] and r.content == "Done."


# --- granite_3 --------------------------------------------------------------------------


def test_granite_think_then_calls_and_stop_token() -> None:
    raw = (
        '<think>Need the weather.</think><|tool_call|>[{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}]<|end_of_text|>'
    )
    r = parse("granite_3", raw)
    assert r.reasoning == "Need the weather." and calls(r) == [("get_weather", {"city": "Paris"})]


def test_granite_3_2_phrases_only_open_reasoning_at_the_start() -> None:
    r = parse(
        "granite_3", "  Here's my thought process:\nHmm.\nHere's my response:\nHello", tools=()
    )
    assert (r.reasoning, r.content) == ("Hmm.", "Hello")
    raw = "Sure. Here is my thought process: none.\nHere is my response: yes"
    r = parse("granite_3", raw, tools=())
    assert (r.reasoning, r.content) == ("", raw)
    r = parse("granite_3", "Here is my thought", tools=())
    assert r.content == "Here is my thought"
    assert feed_each("granite_3", ["Here is my thou"], tools=())[0] == []


def test_granite_response_tags_are_dropped() -> None:
    r = parse("granite_3", "<think>a</think>\n<response>Hello <b>you</b></response>", tools=())
    assert (r.reasoning, r.content) == ("a", "Hello <b>you</b>")


# --- llama3_json / llama3_builtin_python_tag ----------------------------------------------


def test_llama3_bare_json_is_a_call_only_when_it_names_a_declared_tool() -> None:
    raw = '{"name": "Bob", "age": 3}'
    assert parse("llama3_json", raw).content == raw
    raw = '{"name": "get_time", "parameters": {}}'
    assert parse("llama3_json", raw, tools=()).content == raw
    r = parse("llama3_json", 'Answer: {"name": "get_time", "parameters": {}}')
    assert r.calls == []


def test_llama3_calls_after_the_python_tag_and_text_after_a_call() -> None:
    raw = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo", "days": -3}}'
    raw += "<|eom_id|>"
    assert calls(parse("llama3_json", raw)) == [("get_weather", {"city": "Oslo", "days": -3})]
    raw = '{"name": "get_time", "parameters": {"timezone": "UTC"}}\n'
    raw += '{"name": "get_time", "arguments": {}}\nDone.'
    r = parse("llama3_json", raw)
    assert calls(r) == [("get_time", {"timezone": "UTC"}), ("get_time", {})]
    assert r.content == "Done."


@pytest.mark.parametrize("fmt", ["llama3_json", "llama3_builtin_python_tag"])
def test_llama3_builtin_call_and_raw_code(fmt: str) -> None:
    raw = '<|python_tag|>wolfram_alpha.call(query="2+2", precision=-1, exact=True)<|eom_id|>'
    assert calls(parse(fmt, raw, tools=())) == [
        ("wolfram_alpha", {"query": "2+2", "precision": -1, "exact": True})
    ]
    raw = '<|python_tag|>print(x.call(1))\nprint("<\\n>")<|eom_id|>Done'
    r = parse(fmt, raw, tools=())
    assert calls(r) == [("code_interpreter", {"code": 'print(x.call(1))\nprint("<\\n>")'})]
    assert r.content == "Done"


def test_llama3_raw_code_streams_as_it_arrives() -> None:
    events = feed_each(
        "llama3_builtin_python_tag", ["<|python_tag|>import", " math\nx = '", "<|eo"]
    )
    assert events[0] == []  # `import` could still be `import.call(`
    assert events[1] == [
        ToolCallStart(0, events[1][0].id, "code_interpreter"),  # type: ignore[union-attr]
        ToolCallDelta(0, '{"code": "import math\\nx = \''),
    ]
    assert events[2] == []  # a possible `<|eom_id|>` is held


def test_llama3_truncated_outputs_finish_as_valid_calls() -> None:
    r = parse("llama3_json", '<|python_tag|>brave_search.call(query="Men')
    assert calls(r) == [("brave_search", {"query": "Men"})]
    r = parse("llama3_json", "<|python_tag|>brave_se")
    assert calls(r) == [("code_interpreter", {"code": "brave_se"})]
    r = parse("llama3_json", '{"name": "get_weather", "parameters": {"city": "Par')
    assert calls(r) == [("get_weather", {"city": "Par"})]


# --- functionary_v3_1 -------------------------------------------------------------------


def test_functionary_v3_1_markup_inside_arguments_and_missing_close() -> None:
    raw = (
        '<function=get_weather>{"city": "</function><function=x>"}'
        '<function=get_time>{"timezone": "UTC"}</function>\nAnything else?<|eot_id|>'
    )
    r = parse("functionary_v3_1", raw)
    assert calls(r) == [
        ("get_weather", {"city": "</function><function=x>"}),
        ("get_time", {"timezone": "UTC"}),
    ]
    assert r.content == "Anything else?"


def test_functionary_v3_1_python_tag_is_the_python_tool() -> None:
    raw = "Running it.<|python_tag|>import math\nprint(math.pi)<|eom_id|>"
    r = parse("functionary_v3_1", raw, tools=())
    assert r.content == "Running it."
    assert calls(r) == [("python", {"code": "import math\nprint(math.pi)"})]


# --- functionary_v3_2 -------------------------------------------------------------------


def test_functionary_v3_2_segments() -> None:
    raw = (
        'all\nChecking.>>>get_weather\n{"city": "Paris"}\n>>>python\n{"code": "1+1"}'
        ">>>python\nprint('>')\n>>>all\nDone.<|eot_id|>"
    )
    r = parse("functionary_v3_2", raw)
    assert r.content == "Checking.Done."
    assert calls(r) == [
        ("get_weather", {"city": "Paris"}),
        ("python", {"code": "1+1"}),
        ("python", {"code": "print('>')\n"}),
    ]


def test_functionary_v3_2_lines_that_are_no_recipient_are_content() -> None:
    assert parse("functionary_v3_2", "Hello there!\nBye.").content == "Hello there!\nBye."
    assert parse("functionary_v3_2", "Hello\nthere").content == "Hello\nthere"
    assert parse("functionary_v3_2", ">>>all\nHi >> you").content == "Hi >> you"
    r = parse("functionary_v3_2", 'get_time\n{"timezone": "UTC"} and more')
    assert calls(r) == [("get_time", {"timezone": "UTC"})] and r.content == "and more"


def test_functionary_v3_2_cut_after_the_recipient_line() -> None:
    assert calls(parse("functionary_v3_2", "get_time\n")) == [("get_time", {})]
    assert calls(parse("functionary_v3_2", "python\n")) == [("python", {"code": ""})]
    assert feed_each("functionary_v3_2", ["get_time\n"])[0] == []


# --- detection --------------------------------------------------------------------------


def test_model_names_of_group_a() -> None:
    assert model_format("fireworks-ai/llama-3-firefunction-v2") == "firefunction_v2"
    assert model_format("meta-llama/Llama-3.3-70B-Instruct") == "llama3_json"
    assert model_format("meetkai/functionary-small-v3.2") == "functionary_v3_2"
    assert model_format("CohereForAI/c4ai-command-r7b-12-2024") == "command_r7b"
    assert model_format("ibm-granite/granite-3.3-8b-instruct") == "granite_3"


def test_stop_tokens_never_show() -> None:
    for fmt, raw in {
        "mistral_json_array": "Hi</s>",
        "llama3_json": "Hi<|eot_id|>",
        "functionary_v3_1": "Hi<|eom_id|>",
        "functionary_v3_2": "all\nHi<|eot_id|>",
        "firefunction_v2": "Hi<|eot_id|>",
        "command_r7b": "<|START_RESPONSE|>Hi<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
        "granite_3": "Hi<|end_of_text|>",
    }.items():
        assert parse(fmt, raw).content == "Hi", fmt
    assert [type(e) for e in feed_each("granite_3", ["Hi<|end_of"])[0]] == [TextDelta]


# --- robustness: fragment soups, as test_fuzz does for the other formats ------------------

FRAGMENTS_A = {
    "mistral_json_array": [
        "[TOOL_CALLS]",
        "[TOOL_CALLS] [",
        '{"name": "f", "arguments": ',
        '"id": "abcdefghi"',
        '"id": ',
        ", ",
        "</s>",
        '{"a": 1}',
    ],
    "firefunction_v2": [
        " functools[",
        "functools[",
        '{"name": "f", "arguments": ',
        '{"name": "f", "arguments": {}}',
        ", ",
        "<|eot_id|>",
        '{"a": 1}',
    ],
    "command_r7b": [
        "<|START_THINKING|>",
        "<|END_THINKING|>",
        "<|START_ACTION|>",
        "<|END_ACTION|>",
        "<|START_RESPONSE|>",
        "<|END_RESPONSE|>",
        "<|END_OF_TURN_TOKEN|>",
        '{"tool_call_id": "0", ',
        '"tool_name": "f", ',
        '"parameters": ',
        '{"a": 1}',
    ],
    "granite_3": [
        "<think>",
        "</think>",
        "<response>",
        "</response>",
        "<|tool_call|>",
        "Here is my thought process:",
        "Here's my response:",
        "Here is my ",
        "<|end_of_text|>",
        '[{"name": "f", "arguments": ',
        '{"a": 1}',
    ],
    "llama3_json": [
        '{"name": "f", "parameters": ',
        '{"name": "f", "arguments": {}}',
        '"type": "function", ',
        "; ",
        "<|python_tag|>",
        "f.call(",
        "n=1",
        's="x',
        ")",
        "<|eom_id|>",
        "<|eot_id|>",
        '{"a": 1}',
    ],
    "functionary_v3_1": [
        "<function=f>",
        "<function=",
        "</function>",
        "<|python_tag|>",
        "print(1)",
        "<|eom_id|>",
        "<|eot_id|>",
        '{"a": 1}',
    ],
    "functionary_v3_2": [
        ">>>",
        "all\n",
        "f\n",
        "python\n",
        "print('x')",
        ">",
        "<|eot_id|>",
        '{"a": 1}',
    ],
}
FRAGMENTS_A["llama3_builtin_python_tag"] = FRAGMENTS_A["llama3_json"]


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS_A))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fragment_soup(fmt: str, data: st.DataObject) -> None:
    check_soup(fmt, COMMON + FRAGMENTS_A[fmt], TOOLS, data)
