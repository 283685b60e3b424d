"""DeepSeek V3.1 / V3.2 and V4 DSML, GLM, Kimi, MiniMax, Seed-OSS, Gemma 4 and FunctionGemma
beyond the corpus: leniency, typing, ids, streaming, truncation, stop tokens."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.canonical.events import ToolCallDelta
from responsekit.parsing import get_parser

from .parsing_support import Folded, check_soup, run
from .test_formats import args
from .test_formats import parse as parse_three_ways
from .test_fuzz import COMMON, TOOLS

CONFIGURE = [
    {
        "type": "function",
        "function": {
            "name": "configure",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "count": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "enabled": {"type": "boolean"},
                    "tags": {"type": "array"},
                    "options": {"type": "object"},
                },
            },
        },
    }
]


def parse(fmt: str, raw: str, *, tools: Any = CONFIGURE, thinking_open: bool = False) -> Folded:
    """`test_formats.parse` (one-shot, per character and in 3-char pieces agree), and every
    call is closed."""
    result = parse_three_ways(fmt, raw, tools=tools, thinking_open=thinking_open)
    assert all(call.ended for call in result.calls)
    return result


def arg_deltas(fmt: str, chunks: list[str], *, tools: Any = CONFIGURE) -> list[str]:
    """The argument deltas `feed()` returns for each chunk, before `finish()`."""
    parser = get_parser(fmt)(tools)
    out = []
    for chunk in chunks:
        out.append("".join(e.arguments for e in parser.feed(chunk) if isinstance(e, ToolCallDelta)))
    return out


# --- DeepSeek V3.1 ---------------------------------------------------------------------

V31_CALL = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"
    '{"city": "Tokyo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)


def test_deepseek_v3_1_call_in_unclosed_reasoning_is_a_call_at_the_end() -> None:
    # llama.cpp vector: forced open, no `</think>`, the model called from its reasoning.
    r = parse("deepseek_v3_1", "REASONING" + V31_CALL, thinking_open=True)
    assert r.reasoning == "REASONING" and r.content == ""
    assert [c.name for c in r.calls] == ["get_time"] and args(r) == [{"city": "Tokyo"}]
    # While it streams, the undecided section is held: no marker text, no call yet.
    snapshot = run(
        get_parser("deepseek_v3_1")([], thinking_open=True), list("R" + V31_CALL), finish=False
    )
    assert (snapshot.reasoning, snapshot.calls) == ("R", [])


def test_deepseek_v3_1_text_after_a_held_section_is_content() -> None:
    r = parse("deepseek_v3_1", V31_CALL + "Done.<｜end▁of▁sentence｜>", thinking_open=True)
    assert (r.reasoning, r.content, [c.name for c in r.calls]) == ("", "Done.", ["get_time"])


def test_deepseek_v3_1_lenient_call_forms() -> None:
    raw = (
        'Hi<｜tool▁call▁begin｜>a<｜tool▁sep｜>{"x": "<｜tool▁call▁end｜>"}<｜tool▁call▁end｜>'
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>b<｜tool▁sep｜>{"y": -1}'
        "<｜tool▁call▁begin｜>c<｜tool▁sep｜>{}<｜tool▁calls▁end｜>"
    )
    r = parse("deepseek_v3_1", raw)
    assert r.content == "Hi"
    assert [c.name for c in r.calls] == ["a", "b", "c"]
    assert args(r) == [{"x": "<｜tool▁call▁end｜>"}, {"y": -1}, {}]


def test_deepseek_v3_1_thinking_open_from_the_prompt() -> None:
    cls = get_parser("deepseek_v3_1")
    assert cls.thinking_open_in("<｜User｜>hi<｜Assistant｜><think>")
    assert not cls.thinking_open_in("<｜User｜>hi<｜Assistant｜><think></think>")
    assert not cls.thinking_open_in("<｜User｜>hi<｜Assistant｜></think>")


# --- DeepSeek V3.2 / V4 DSML ------------------------------------------------------------

DSML = "｜DSML｜"


def _dsml(*params: str, name: str = "configure") -> str:
    body = "".join(f"<{DSML}parameter {p}</{DSML}parameter>\n" for p in params)
    return f'<{DSML}function_calls>\n<{DSML}invoke name="{name}">\n{body}</{DSML}invoke>\n</{DSML}function_calls>'


def test_dsml_string_attribute_decides_the_type() -> None:
    raw = _dsml(
        'name="name" string="true">say "hi"\\n\n\tnow',
        'name="count" string="true">12',  # the attribute wins over the schema
        'name="ratio" string="false">-0.5',
        'name="tags" string="false">not json',  # not JSON: kept as text
        'name="enabled">true',  # no attribute: the schema types it
        'name="options" string="false">{"a": [1, null]}',
    )
    r = parse("deepseek_v3_2_dsml", raw)
    assert args(r) == [
        {
            "name": 'say "hi"\\n\n\tnow',
            "count": "12",
            "ratio": -0.5,
            "tags": "not json",
            "enabled": True,
            "options": {"a": [1, None]},
        }
    ]


def test_dsml_string_values_stream_and_json_values_wait() -> None:
    head = f'<{DSML}function_calls>\n<{DSML}invoke name="configure">\n'
    chunks = [
        head,
        f'<{DSML}parameter name="name" string="true">Par',
        "is",
        f'</{DSML}parameter>\n<{DSML}parameter name="count" string="false">1',
        "2",
        f"</{DSML}parameter>",
    ]
    assert arg_deltas("deepseek_v3_2_dsml", chunks) == [
        "{",
        '"name": "Par',
        "is",
        '"',
        "",
        ', "count": 12',
    ]


def test_dsml_invoke_outside_a_block_and_text_after() -> None:
    raw = f'<{DSML}invoke name="configure">\n<{DSML}parameter name="count" string="false">3</{DSML}parameter>\n</{DSML}invoke>\nThen this.<｜end▁of▁sentence｜>'
    r = parse("deepseek_v3_2_dsml", raw)
    assert (r.content, args(r)) == ("Then this.", [{"count": 3}])


@pytest.mark.parametrize("fmt", ["deepseek_v3_2_dsml", "deepseek_v4_dsml"])
@pytest.mark.parametrize("block", ["function_calls", "tool_calls"])
def test_dsml_block_of_either_version_is_read_whole(fmt: str, block: str) -> None:
    """V3.2 names the block `function_calls`, V4 `tool_calls`: either one's
    markers are read, none comes back as text, and text after the block is content."""
    raw = (
        f'Sure.\n\n<{DSML}{block}>\n<{DSML}invoke name="configure">\n'
        f'<{DSML}parameter name="name" string="true">Paris</{DSML}parameter>\n'
        f'<{DSML}parameter name="count" string="false">2</{DSML}parameter>\n</{DSML}invoke>\n'
        f'<{DSML}invoke name="configure">\n</{DSML}invoke>\n</{DSML}{block}>Done.<｜end▁of▁sentence｜>'
    )
    r = parse(fmt, raw)
    assert (r.content, args(r)) == ("Sure.\n\nDone.", [{"name": "Paris", "count": 2}, {}])


def test_dsml_v4_block_closing_a_call_without_its_invoke_end() -> None:
    raw = f'<{DSML}tool_calls>\n<{DSML}invoke name="configure">\n</{DSML}tool_calls>After.'
    r = parse("deepseek_v4_dsml", raw)
    assert (r.content, args(r)) == ("After.", [{}])


def test_dsml_v4_partial_block_marker_is_held_back() -> None:
    """A cut `<｜DSML｜tool_ca…` is neither text nor a call until it is decided."""
    parser = get_parser("deepseek_v4_dsml")(CONFIGURE)
    snapshot = run(parser, ["Hi<", f"{DSML}tool_ca"], finish=False)
    assert (snapshot.content, snapshot.calls) == ("Hi", [])


def test_dsml_thinking_reopens_after_tool_results() -> None:
    cls = get_parser("deepseek_v3_2_dsml")
    assert cls.thinking_open_in("</function_results>\n\n<think>")
    assert not cls.thinking_open_in("</function_results>\n\n<think></think>")


# --- GLM-4.5 / GLM-4.7 ------------------------------------------------------------------


def test_glm_values_are_typed_from_the_schema_and_kept_verbatim() -> None:
    raw = (
        "<tool_call>configure\n<arg_key>name</arg_key>\n<arg_value> 007 </arg_value>\n"
        "<arg_key>count</arg_key>\n<arg_value>null</arg_value>\n"
        "<arg_key>tags</arg_key>\n<arg_value>['a', 1]</arg_value>\n"
        "<arg_key>extra</arg_key>\n<arg_value>5</arg_value>\n</tool_call>"
    )
    assert args(parse("glm_4_5", raw)) == [
        {"name": " 007 ", "count": None, "tags": ["a", 1], "extra": "5"}
    ]


def test_glm_zero_argument_call_and_name_forms() -> None:
    raw = (
        "<tool_call>configure</tool_call>\n<tool_call>\nconfigure\n</tool_call>"
        "<tool_call>configure<arg_key>count</arg_key><arg_value>2</arg_value></tool_call>"
    )
    for fmt in ("glm_4_5", "glm_4_7"):
        r = parse(fmt, raw)
        assert [c.name for c in r.calls] == ["configure"] * 3
        assert args(r) == [{}, {}, {"count": 2}]


def test_glm_text_after_calls_is_content_and_stop_tokens_are_dropped() -> None:
    raw = "\n<think>plan</think>\nSure.<|user|>\n<tool_call>configure\n</tool_call>\nDone.<|observation|>"
    r = parse("glm_4_5", raw)
    assert (r.reasoning, r.content, len(r.calls)) == ("plan", "Sure.\n\nDone.", 1)


def test_glm_truncated_value_is_closed() -> None:
    raw = "<tool_call>configure<arg_key>name</arg_key><arg_value>Rio</arg_va"
    assert args(parse("glm_4_7", raw)) == [{"name": "Rio"}]


def test_glm_thinking_open_from_the_prompt() -> None:
    assert get_parser("glm_4_7").thinking_open_in("<|user|>hi<|assistant|><think>")
    assert not get_parser("glm_4_7").thinking_open_in("<|user|>hi<|assistant|></think>")
    assert not get_parser("glm_4_5").thinking_open_in("<|assistant|>\n<think></think>")
    assert not get_parser("glm_4_5").thinking_open_in("<|assistant|>")


# --- Kimi K2 ----------------------------------------------------------------------------


def _kimi(call_id: str, arguments: str = "{}") -> str:
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"


def test_kimi_calls_inside_reasoning_are_extracted() -> None:
    raw = (
        "<think>Let me look.<|tool_calls_section_begin|>"
        + _kimi("functions.configure:0", '{"count": 1}')
        + "<|tool_calls_section_end|>Still thinking."
    )
    r = parse("kimi_k2", raw)
    assert r.reasoning == "Let me look.Still thinking." and r.content == ""
    assert [(c.id, c.name) for c in r.calls] == [("functions.configure:0", "configure")]


def test_kimi_names_come_from_ids_and_repeated_ids_are_replaced() -> None:
    raw = (
        "<|tool_calls_section_begin|>"
        + _kimi("functions.ns.tool:v2:0")
        + _kimi("functions.ns.tool:v2:0")
        + _kimi("plain_name")
        + "<|tool_calls_section_end|>"
    )
    r = parse("kimi_k2", raw)
    assert [c.name for c in r.calls] == ["ns.tool:v2", "ns.tool:v2", "plain_name"]
    assert r.calls[0].id == "functions.ns.tool:v2:0"
    assert len({c.id for c in r.calls}) == 3 and r.calls[2].id != "plain_name"


def test_kimi_lenient_markers_and_stop_tokens() -> None:
    raw = (
        "Calling.<|tool_call_section_begin|>"
        + _kimi("functions.a:0", '{"s": "<|tool_call_end|>"}').removesuffix("<|tool_call_end|>")
        + _kimi("functions.b:1")
        + "<|tool_call_section_end|>"
        + _kimi("functions.c:2")
        + "Done.<|im_end|>"
    )
    r = parse("kimi_k2", raw)
    assert r.content == "Calling.Done."
    assert [c.name for c in r.calls] == ["a", "b", "c"]
    assert args(r)[0] == {"s": "<|tool_call_end|>"}


def test_kimi_truncated_arguments_are_completed() -> None:
    raw = "<|tool_calls_section_begin|>" + _kimi("functions.f:0", '{"s": "ab').removesuffix(
        "<|tool_call_end|>"
    )
    r = parse("kimi_k2", raw)
    assert r.calls[0].id == "functions.f:0" and args(r) == [{"s": "ab"}]


# --- MiniMax-M2 -------------------------------------------------------------------------


def test_minimax_strips_one_newline_per_side_and_types_values() -> None:
    raw = (
        '<minimax:tool_call>\n<invoke name="configure">\n'
        '<parameter name="name">\n\n007\n\n</parameter>\n'
        "<parameter name='count'>\n3\n</parameter>\n"
        '<parameter name="enabled">False</parameter>\n</invoke>\n</minimax:tool_call>'
    )
    assert args(parse("minimax_m2", raw)) == [{"name": "\n007\n", "count": 3, "enabled": False}]


def test_minimax_missing_closing_tags() -> None:
    raw = (
        'ok</think><minimax:tool_call>\n<invoke name="configure">\n'
        '<parameter name="name">a\n<parameter name="count">2\n</invoke>\n'
        '<invoke name="configure">\n<parameter name="ratio">0.5</parameter>\n'
        "</minimax:tool_call>Bye[e~["
    )
    r = parse("minimax_m2", raw, thinking_open=True)
    assert (r.reasoning, r.content) == ("ok", "Bye")
    assert args(r) == [{"name": "a", "count": 2}, {"ratio": 0.5}]


def test_minimax_thinking_open_from_the_prompt() -> None:
    assert get_parser("minimax_m2").thinking_open_in("]~b]ai\n<think>\n")
    assert not get_parser("minimax_m2").thinking_open_in("]~b]ai\n")


# --- Seed-OSS ---------------------------------------------------------------------------


def test_seed_oss_reads_the_templates_python_str_values() -> None:
    raw = (
        "<seed:tool_call>\n<function=configure>\n<parameter=enabled>True</parameter>\n"
        "<parameter=tags>['a', 'b']</parameter>\n<parameter=options>{'k': None}</parameter>\n"
        "<parameter=name>line 1\nline 2</parameter>\n</function>\n</seed:tool_call>"
    )
    assert args(parse("seed_oss", raw)) == [
        {"enabled": True, "tags": ["a", "b"], "options": {"k": None}, "name": "line 1\nline 2"}
    ]


def test_seed_oss_budget_prompt_is_not_open_and_eos_is_dropped() -> None:
    cls = get_parser("seed_oss")
    budget_zero = "<seed:bos>assistant\n<seed:think>\n<seed:cot_budget_reflect>…</seed:cot_budget_reflect>\n</seed:think>"
    assert not cls.thinking_open_in(budget_zero)
    assert cls.thinking_open_in("<seed:bos>assistant\n<seed:think>")
    r = parse("seed_oss", "The answer is 7.<seed:eos>")
    assert r.content == "The answer is 7."


def test_seed_oss_several_functions_in_one_block() -> None:
    raw = (
        "<seed:tool_call>\n<function=configure>\n<parameter=count>1</parameter>\n</function>\n"
        "<function=configure>\n<parameter=count>2\n</function>\n</seed:tool_call>"
    )
    assert args(parse("seed_oss", raw)) == [{"count": 1}, {"count": 2}]


# --- Gemma 4 / FunctionGemma ------------------------------------------------------------

Q = '<|"|>'


def test_gemma4_dict_syntax_to_json() -> None:
    raw = (
        f"<|tool_call>call:configure{{name:{Q}a, b: {{c}}]{Q},count:-7,ratio:1.5e10,"
        f"tags:[{Q}x{Q},[1,true],{{k:None}}],options:{{deep:{{when:12:30}},{Q}q{Q}:null}},"
        f"empty:{{}},flag:True}}<tool_call|>"
    )
    assert args(parse("gemma4", raw)) == [
        {
            "name": "a, b: {c}]",
            "count": -7,
            "ratio": 1.5e10,
            "tags": ["x", [1, True], {"k": None}],
            "options": {"deep": {"when": "12:30"}, "q": None},
            "empty": {},
            "flag": True,
        }
    ]


def test_gemma4_strings_stream_and_bare_values_wait() -> None:
    chunks = [
        "<|tool_call>call:configure{name:",
        '<|"',
        "|>San Fr",
        "ancisco<|",
        '"|>,count:1',
        "2}",
    ]
    assert arg_deltas("gemma4", chunks) == [
        "{",
        "",
        '"name": "San Fr',
        "ancisco",
        '"',
        ', "count": 12}',
    ]


def test_gemma4_calls_without_arguments_or_end_token() -> None:
    raw = "<|tool_call>call:configure<tool_call|><|tool_call>call:configure{}Then text.<turn|>"
    r = parse("gemma4", raw)
    assert args(r) == [{}, {}] and r.content == "Then text."


def test_gemma4_end_token_closes_an_unfinished_object() -> None:
    r = parse("gemma4", f"<|tool_call>call:configure{{tags:[{Q}a{Q},{Q}b<tool_call|>After")
    assert args(r) == [{"tags": ["a", "b"]}] and r.content == "After"


def test_gemma4_reasoning_channel_and_prompt() -> None:
    r = parse("gemma4", "<|channel>thought\nHmm.<channel|>Answer.<|tool_response>")
    assert (r.reasoning, r.content) == ("Hmm.", "Answer.")
    cls = get_parser("gemma4")
    assert not cls.thinking_open_in("<|turn>model\n<|channel>thought\n<channel|>")
    assert not cls.thinking_open_in("<|turn>model\n")


def test_functiongemma_escape_strings() -> None:
    raw = (
        "Sure.<start_function_call>call:configure{name:<escape>x, y:z<escape>,count:5,"
        "tags:[<escape>a<escape>]}<end_function_call><start_function_response>"
    )
    r = parse("functiongemma", raw, thinking_open=True)
    assert (r.reasoning, r.content) == ("", "Sure.")
    assert args(r) == [{"name": "x, y:z", "count": 5, "tags": ["a"]}]


# --- robustness: fragment soups, as test_fuzz does for the other formats ------------------

FRAGMENTS_B = {
    "deepseek_v3_1": [
        "<think>",
        "</think>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "f",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "<｜end▁of▁sentence｜>",
        '{"a": 1}',
        '{"s": "x',
    ],
    "deepseek_v3_2_dsml": [
        "<think>",
        "</think>",
        f"<{DSML}function_calls>",
        f"</{DSML}function_calls>",
        f"</{DSML}tool_calls>",
        f'<{DSML}invoke name="f">',
        f"</{DSML}invoke>",
        f'<{DSML}parameter name="n" string="false">',
        f'<{DSML}parameter name="s" string="true">',
        f'<{DSML}parameter name="n">',
        f"</{DSML}parameter>",
        "<｜end▁of▁sentence｜>",
    ],
    "deepseek_v4_dsml": [
        "<think>",
        "</think>",
        f"<{DSML}tool_calls>",
        f"</{DSML}tool_calls>",
        f"<{DSML}function_calls>",
        f"</{DSML}function_calls>",
        f'<{DSML}invoke name="f">',
        f"</{DSML}invoke>",
        f'<{DSML}parameter name="n" string="false">',
        f'<{DSML}parameter name="s" string="true">',
        f"</{DSML}parameter>",
        "<｜end▁of▁sentence｜>",
    ],
    "glm_4_5": [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "f",
        "f\n",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "n",
        "s",
        "<|user|>",
        "<|observation|>",
    ],
    "glm_4_7": [
        "<think>",
        "</think>",
        "<tool_call>f",
        "</tool_call>",
        "<arg_key>n</arg_key>",
        "<arg_key>s</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<|user|>",
    ],
    "kimi_k2": [
        "<think>",
        "</think>",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "functions.f:0",
        "functions.f:1",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|im_end|>",
        '{"a": 1}',
    ],
    "minimax_m2": [
        "<think>",
        "</think>",
        "<minimax:tool_call>",
        "</minimax:tool_call>",
        '<invoke name="f">',
        "</invoke>",
        '<parameter name="n">',
        '<parameter name="s">',
        "</parameter>",
        "\n</parameter>",
        '\n<parameter name="s">',
        "\n</invoke>",
        "[e~[",
    ],
    "seed_oss": [
        "<seed:think>",
        "</seed:think>",
        "<seed:cot_budget_reflect>",
        "<seed:tool_call>",
        "</seed:tool_call>",
        "<function=f>",
        "</function>",
        "<parameter=n>",
        "<parameter=s>",
        "</parameter>",
        "\n</parameter>",
        "\n<parameter=s>",
        "\n</function>",
        "<seed:eos>",
    ],
    "gemma4": [
        "<|channel>thought\n",
        "<channel|>",
        "<|tool_call>",
        "call:f",
        "<tool_call|>",
        Q,
        "n:",
        "s:",
        "-7",
        "1.5e10",
        "<turn|>",
        "<|tool_response>",
    ],
    "functiongemma": [
        "<start_function_call>",
        "call:f",
        "<end_function_call>",
        "<escape>",
        "n:",
        "s:",
        "5",
        "<start_function_response>",
        "<end_of_turn>",
    ],
}


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS_B))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fragment_soup(fmt: str, data: st.DataObject) -> None:
    check_soup(fmt, COMMON + FRAGMENTS_B[fmt], TOOLS, data)
