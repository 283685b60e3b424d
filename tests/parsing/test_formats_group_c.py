"""Pythonic, Llama 4, LFM2, Olmo 3, xLAM, Phi-4-mini, generic JSON, Nemotron and Apertus
beyond the corpus, and the streaming Python-literal converter: leniency, ids, text that
only looks like calls, truncation, stop tokens, chunking."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.canonical.events import ToolCallDelta, ToolCallStart
from responsekit.parsing import get_parser
from responsekit.parsing.detect import model_format
from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.pyliteral import PythonCallList, PythonValue

from .parsing_support import Folded, check_soup, fold, heal, split_at
from .test_formats import parse as parse_three_ways
from .test_fuzz import COMMON, TOOLS

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {}}},
]


def parse(fmt: str, raw: str, *, tools: Any = WEATHER, thinking_open: bool = False) -> Folded:
    """One-shot, per character and in 3-character pieces; the three must agree."""
    result = parse_three_ways(fmt, raw, tools=tools, thinking_open=thinking_open)
    assert all(call.ended for call in result.calls)
    return result


def calls(result: Folded) -> list[tuple[str, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in result.calls]


# --- PythonValue: Python literals streamed as JSON ----------------------------------------


def convert(source: str, chunks: list[str] | None = None, *, finish: bool = True) -> str:
    """The JSON a keyword value `source` (followed by `)`) converts to."""
    value = PythonValue()
    out = []
    for chunk in chunks or [source + ")"]:
        emitted, pos = value.feed(chunk)
        out.append(emitted)
        if value.done:
            assert chunk[pos:].startswith(")")
            break
    if finish and not value.done:
        out.append(value.close())
    return "".join(out)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("-3", -3),
        ("- 3", -3),
        ("1_000", 1000),
        ("0x1F", 31),
        (".5", 0.5),
        ("1e-3", 0.001),
        ("True", True),
        ("null", None),
        ("(1, 2)", [1, 2]),
        ("(1,)", [1]),
        ("()", []),
        ("('grouped')", "grouped"),
        ("('implicit' \"concat\"\n 'enation')", "implicitconcatenation"),
        ("{1, 2}", [1, 2]),
        ("{}", {}),
        (
            "{'a': {'b': [None, False]}, 2: 'int key', True: 'bool key'}",
            {"a": {"b": [None, False]}, "2": "int key", "true": "bool key"},
        ),
        ("{bare: 1}", {"bare": 1}),
        ("[1, 2,]", [1, 2]),
        ("'''a ' \"\" '' b'''", "a ' \"\" '' b"),
        ("r'\\d+\\''", "\\d+\\'"),
        ("b'bytes'", "bytes"),
        ("'\\x41\\101\\0\\N{BULLET}\\u00e9\\U0001F600\\q'", "AA\x00•é😀\\q"),
        ("'\\ud83d\\ude00'", "😀"),
        ("'line\\\ncontinued'", "linecontinued"),
        ("os.path", "os.path"),
        ("f(1, 'a,b')", "f(1, 'a,b')"),
        ("[g(2), 3]", ["g(2)", 3]),
        ("float('nan')", "float('nan')"),
        ("1e400", "1e400"),
        ("- 1e400", "- 1e400"),
        ("[1 2]", ["1 2"]),
        ("[1, (2]", [1, [2]]),
    ],
)
def test_python_values_convert_to_json(source: str, expected: Any) -> None:
    assert json.loads(convert(source)) == expected
    assert convert(source, list(source + ")")) == convert(source)


def test_string_values_stream_as_they_arrive_even_inside_containers() -> None:
    source = "{'k': ['first', 'sec"
    for cut in range(len(source)):
        value = PythonValue()
        emitted = value.feed(source[:cut])[0] + value.feed(source[cut:])[0]
        assert emitted == '{"k": ["first", "sec'
    assert json.loads(convert("", [source])) == {"k": ["first", "sec"]}


def test_keys_tokens_and_undecided_brackets_are_held_until_decided() -> None:
    value = PythonValue('"x": ')
    assert value.feed("{'key") == ("", 5)  # a dict or a set? and keys never show partially
    assert value.feed("': 12") == ('"x": {', 5)  # the key waits for its value, 12 may grow
    assert value.feed(", 'b': ('s'") == ('"key": 12', 11)  # a tuple or a grouped string?
    assert value.feed(",)}") == (', "b": ["s"]}', 3)
    assert value.feed(")") == ("", 0) and value.done and value.started


def test_a_value_that_never_starts_leaves_no_trace() -> None:
    value = PythonValue('"x": ')
    assert value.feed("  ")[0] == ""
    assert value.close() == "" and not value.started
    skipped = PythonValue(skip=True)
    assert skipped.feed("[1, 'a)', {2: (3)}], k=1") == ("", 19) and skipped.done


@st.composite
def python_values(draw: st.DrawFn) -> Any:
    """Values whose `repr` is a Python literal, with JSON-representable results."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(10**20), 10**20)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12)
    )
    return draw(
        st.recursive(
            scalars,
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.lists(inner, max_size=4).map(tuple)
                | st.dictionaries(st.text(max_size=6), inner, max_size=4)
            ),
            max_leaves=12,
        )
    )


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(value=python_values(), data=st.data())
def test_any_python_literal_converts_under_any_chunking(value: Any, data: st.DataObject) -> None:
    source = repr(value) + ")"
    cuts = data.draw(st.lists(st.integers(0, len(source)), max_size=12))
    streamed = convert("", split_at(source, cuts))
    assert json.loads(streamed) == _as_json(value)
    assert streamed == convert(repr(value))
    for end in range(0, len(source), 7):  # snapshots heal, truncations complete
        heal(convert("", [source[:end]], finish=False))
        json.loads(convert("", [source[:end]]) or "null")


# --- CallList and PythonCallReader ---------------------------------------------------------


def test_call_list_names_and_positional_arguments() -> None:
    out = EventBuffer()
    reader = PythonCallList(out, names={"get_time"})
    assert reader.feed("[get_weather(city='x')]") == 12
    assert reader.failed and not reader.started and out.take() == []
    out = EventBuffer()
    reader = PythonCallList(out, unbracketed=True)
    raw = "f(1, 'two', *rest, k=[3], **kw)\ng(x)\n<end>"
    assert raw[reader.feed(raw) :] == "<end>" and reader.done
    folded = fold(out.take())
    assert calls(folded) == [("f", {"k": [3]}), ("g", {})]


# --- pythonic and llama4_pythonic ----------------------------------------------------------


def test_pythonic_text_that_only_looks_like_a_list_is_content() -> None:
    for raw in ("[1, 2] are numbers", "[Note(s)] says hi", "[see the docs](url)", "[]"):
        r = parse("pythonic", raw)
        assert (r.content, r.calls) == (raw, []), raw
    r = parse("pythonic", '[get_weather(city="Paris")]', tools=())
    assert r.calls == [] and r.content == '[get_weather(city="Paris")]'


def test_pythonic_calls_then_text_and_leaked_stop_token() -> None:
    r = parse("pythonic", '[get_weather(city="Paris"), get_time()] Done.<|eot_id|>')
    assert calls(r) == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert r.content == "Done."


def test_pythonic_tool_code_fence_anywhere_and_a_fence_without_calls() -> None:
    r = parse("pythonic", "Sure:\n```tool_code\nget_weather(city='Rome')\n```\nAnything else?")
    assert calls(r) == [("get_weather", {"city": "Rome"})]
    assert r.content == "Sure:\n\nAnything else?"
    for raw in ("Run:\n```tool_code x\n```", "```tool_code\nprint(get_time())\n```"):
        assert parse("pythonic", raw).content == raw, raw


def test_pythonic_only_the_first_call_must_name_a_declared_tool() -> None:
    r = parse("pythonic", "[get_time(), undeclared(a=1)]")
    assert calls(r) == [("get_time", {}), ("undeclared", {"a": 1})]


def test_pythonic_truncated_call_is_completed() -> None:
    r = parse("pythonic", '[get_weather(city="Par", days=-3, opts={"a": [1, "x')
    assert calls(r) == [("get_weather", {"city": "Par", "days": -3, "opts": {"a": [1, "x"]}})]


def test_llama4_markers_with_or_without_brackets_and_a_missing_end_marker() -> None:
    raw = 'Let me check.<|python_start|>get_weather(city="Oslo")<|python_end|>Done.<|eot|>'
    r = parse("llama4_pythonic", raw)
    assert (r.content, calls(r)) == ("Let me check.Done.", [("get_weather", {"city": "Oslo"})])
    r = parse("llama4_pythonic", "<|python_start|>[get_time()]Then text.")
    assert (r.content, calls(r)) == ("Then text.", [("get_time", {})])


def test_llama4_broken_list_between_markers_is_dropped() -> None:
    r = parse("llama4_pythonic", "<|python_start|>[get_time() junk]<|python_end|>After.")
    assert (r.content, calls(r)) == ("After.", [("get_time", {})])


# --- lfm2_pythonic and olmo3_pythonic -----------------------------------------------------


def test_lfm2_mixes_pythonic_and_json_items_after_reasoning() -> None:
    raw = (
        "<think>Two calls.</think>On it.<|tool_call_start|>[get_weather(city='Paris', "
        'when={"day": null, "ok": true}), {"name": "get_time", "arguments": {}}]'
        "<|tool_call_end|><|im_end|>"
    )
    r = parse("lfm2_pythonic", raw)
    assert (r.reasoning, r.content) == ("Two calls.", "On it.")
    assert calls(r) == [
        ("get_weather", {"city": "Paris", "when": {"day": None, "ok": True}}),
        ("get_time", {}),
    ]


def test_olmo3_closing_tag_inside_a_string_and_thinking_open() -> None:
    cls = get_parser("olmo3_pythonic")
    assert cls.thinking_open_in("<|im_start|>assistant\n<think>")
    raw = 'Hm.</think><function_calls>\nget_weather(city="a</function_calls>b")\n</function_calls>'
    r = parse("olmo3_pythonic", raw, thinking_open=True)
    assert (r.reasoning, r.content) == ("Hm.", "")
    assert calls(r) == [("get_weather", {"city": "a</function_calls>b"})]


# --- xlam ---------------------------------------------------------------------------------


def test_xlam_json_that_is_not_a_call_list_stays_content() -> None:
    for raw in ('Here:\n```json\n{"a": 1}\n```', '{"answer": 42}', '[{"name": "other"}]'):
        r = parse("xlam", raw)
        assert (r.content, r.calls) == (raw, []), raw
    raw = '[{"name": "get_time", "arguments": {}}]'
    assert parse("xlam", raw, tools=()).content == raw


def test_xlam_bare_object_after_reasoning_and_wrappers() -> None:
    r = parse("xlam", '<think>Need it.</think>{"name": "get_time", "arguments": {}}')
    assert (r.reasoning, calls(r)) == ("Need it.", [("get_time", {})])
    r = parse("xlam", '<tool_call>{"name": "any_tool", "arguments": {"a": -1}}</tool_call> ok')
    assert (r.content, calls(r)) == ("ok", [("any_tool", {"a": -1})])
    r = parse("xlam", '[TOOL_CALLS][{"name": "any_tool", "arguments": {}}]')  # not a bare `[`
    assert (r.content, calls(r)) == ("", [("any_tool", {})])


# --- phi4_mini, nemotron_toolcall ----------------------------------------------------------


def test_phi4_one_object_per_tag_and_prose_mentioning_functools() -> None:
    raw = (
        'Checking.<|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        '<|/tool_call|><|tool_call|>{"name": "get_time", "arguments": {}}<|/tool_call|><|end|>'
    )
    r = parse("phi4_mini", raw)
    assert r.content == "Checking."
    assert calls(r) == [("get_weather", {"city": "Paris"}), ("get_time", {})]
    assert parse("phi4_mini", "Use functools.partial here.").content == (
        "Use functools.partial here."
    )


def test_nemotron_double_encoded_arguments_and_forced_open_thinking() -> None:
    cls = get_parser("nemotron_toolcall")
    assert cls.thinking_open_in("<SPECIAL_11>Assistant\n<think>\n")
    assert not cls.thinking_open_in("<SPECIAL_11>Assistant\n<think></think>")
    raw = 'Plan.</think><TOOLCALL>[{"name": "get_weather", "arguments": "{\\"city\\": \\"P\\"}"}]'
    r = parse("nemotron_toolcall", raw + "</TOOLCALL><SPECIAL_12>", thinking_open=True)
    assert (r.reasoning, r.content, calls(r)) == ("Plan.", "", [("get_weather", {"city": "P"})])


# --- apertus -------------------------------------------------------------------------------


def test_apertus_calls_inside_the_deliberation_and_several_per_object() -> None:
    raw = (
        '<|inner_prefix|>First the time.<|tools_prefix|>[{"get_time": {}, '
        '"get_weather": {"city": "Bern"}}]<|tools_suffix|>Now answer.<|inner_suffix|>'
        "It is noon.<|assistant_end|>"
    )
    r = parse("apertus", raw)
    assert r.reasoning == "First the time.Now answer."
    assert r.content == "It is noon."
    assert calls(r) == [("get_time", {}), ("get_weather", {"city": "Bern"})]
    assert get_parser("apertus").thinking_open_in("<|assistant_start|><|inner_prefix|>")


def test_apertus_arguments_that_are_no_object_break_the_list() -> None:
    r = parse("apertus", '<|tools_prefix|>[{"get_time": 5}]<|tools_suffix|>Done.')
    assert (r.content, r.calls) == ("Done.", [])


# --- generic_json ---------------------------------------------------------------------------


def test_generic_parallel_calls_keep_the_ids_written_after_the_arguments() -> None:
    raw = (
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_001"}'
        ', {"name": "get_time", "arguments": {}, "id": "call_002"}]}'
    )
    r = parse("generic_json", raw)
    assert [c.id for c in r.calls] == ["call_001", "call_002"]
    assert calls(r) == [("get_weather", {"city": "Paris"}), ("get_time", {})]


def test_generic_single_call_streams_before_its_object_closes() -> None:
    parser = get_parser("generic_json")(WEATHER)
    events = parser.feed('{"tool_call": {"name": "get_weather", "arguments": {"city": "Ro')
    assert isinstance(events[0], ToolCallStart) and events[0].name == "get_weather"
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == '{"city": "Ro'


def test_generic_response_is_decoded_content() -> None:
    r = parse("generic_json", '{"response": "caf\\u00e9 \\ud83d\\ude00 \\"q\\"\\n"}<end_of_turn>')
    assert (r.content, r.calls) == ('café 😀 "q"', [])
    assert parse("generic_json", '{"response": {"a": [1, -2]}}').content == '{"a": [1, -2]}'


def test_generic_other_output_is_content() -> None:
    for raw in ('{"foo": 1} bar', "plain {text}", "{}", '{"response" 1}'):
        assert parse("generic_json", raw).content == raw, raw


# --- detection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "fmt"),
    [
        ("Team-ACE/ToolACE-2-Llama-3.1-8B", "pythonic"),
        ("google/gemma-3-27b-it", "pythonic"),
        ("google/gemma-2-2b-it", "generic_json"),
        ("microsoft/Phi-3.5-mini-instruct", "generic_json"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic"),
        ("LiquidAI/LFM2-8B-A1B", "lfm2_pythonic"),
        ("allenai/Olmo-3-7B-Think", "olmo3_pythonic"),
        ("Salesforce/Llama-xLAM-2-8b-fc-r", "xlam"),
        ("microsoft/Phi-4-mini-instruct", "phi4_mini"),
        ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "nemotron_toolcall"),
        ("swiss-ai/Apertus-8B-Instruct-2509", "apertus"),
    ],
)
def test_model_names(model: str, fmt: str) -> None:
    assert model_format(model) == fmt


# --- robustness: fragment soups, as test_fuzz does for the other formats ------------------

_PYTHON = [
    "f(",
    "f(n=",
    "s=",
    ", ",
    ")",
    "'",
    '"""',
    "'x, y'",
    "True",
    "None",
    "-3",
    "(1,)",
    "{'a': ",
    "r'",
    "g.h(1)",
    "\\n",
]
_ENVELOPES = ['{"name": "f", "arguments": ', '{"name": "f", "arguments": {}}', '"id": "c1"']
FRAGMENTS_C = {
    "pythonic": ["[", *_PYTHON, "```tool_code\n", "```", "<|eot_id|>"],
    "llama4_pythonic": ["[", *_PYTHON, "<|python_start|>", "<|python_end|>", "<|eot|>"],
    "lfm2_pythonic": [
        "<think>",
        "</think>",
        "<|tool_call_start|>",
        "<|tool_call_end|>",
        *_PYTHON,
        *_ENVELOPES,
        "<|im_end|>",
    ],
    "olmo3_pythonic": ["<think>", "</think>", "<function_calls>\n", "</function_calls>", *_PYTHON],
    "xlam": [
        "<think>",
        "</think>",
        "```json\n",
        "[TOOL_CALLS]",
        "<tool_call>",
        "</tool_call>",
        *_ENVELOPES,
        '{"name": "g", ',
        "<|eot_id|>",
    ],
    "phi4_mini": ["<|tool_call|>", "<|/tool_call|>", "functools[", *_ENVELOPES, "<|end|>"],
    "generic_json": [
        '{"tool_calls": ',
        '{"tool_call": ',
        '{"response": ',
        *_ENVELOPES,
        '"\\ud83d',
        "<end_of_turn>",
    ],
    "nemotron_toolcall": ["<think>", "</think>", "<TOOLCALL>", "</TOOLCALL>", *_ENVELOPES],
    "apertus": [
        "<|inner_prefix|>",
        "<|inner_suffix|>",
        "<|tools_prefix|>",
        "<|tools_suffix|>",
        '{"f": ',
        '{"f": {"n": 1}}',
        '"{\\"s\\": 1}"',
        "<|assistant_end|>",
    ],
}


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS_C))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fragment_soup(fmt: str, data: st.DataObject) -> None:
    check_soup(fmt, COMMON + FRAGMENTS_C[fmt], TOOLS, data)
