"""Format behaviour beyond the corpus: leniency, typing, truncation, stop tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.parsing import get_parser

from .parsing_support import Folded, check_soup, run, split_at

WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "zip": {"type": "string"},
                    "detailed": {"type": "boolean"},
                    "hours": {"type": "array"},
                },
            },
        },
    }
]


def parse(fmt: str, raw: str, *, tools: Any = WEATHER, thinking_open: bool = False) -> Folded:
    """Parse one-shot, per character and in 3-char pieces; all three must agree."""
    results = []
    for chunks in ([raw], list(raw), [raw[i : i + 3] for i in range(0, len(raw), 3)]):
        parser = get_parser(fmt)(tools, thinking_open=thinking_open)
        results.append(run(parser, chunks))
    assert (
        results[0].comparable(False) == results[1].comparable(False) == results[2].comparable(False)
    )
    return results[0]


def args(result: Folded) -> list[Any]:
    return [json.loads(c.arguments) for c in result.calls]


def test_leaked_stop_tokens_are_stripped() -> None:
    r = parse("hermes_json", "<think>a</think>Hello<|im_end|>")
    assert (r.reasoning, r.content) == ("a", "Hello")
    r = parse("deepseek_r1", "x</think>Done.<｜end▁of▁sentence｜>", thinking_open=True)
    assert (r.reasoning, r.content) == ("x", "Done.")
    r = parse("mistral_args", "Hi</s>")
    assert r.content == "Hi"
    r = parse("gpt_oss_harmony", "<|channel|>final<|message|>Bye<|return|>")
    assert r.content == "Bye"


def test_think_tag_later_in_content_is_text() -> None:
    r = parse("think_tags", "Answer: use <think> tags.")
    assert r.content == "Answer: use <think> tags." and r.reasoning == ""


def test_qwen3_coder_values_are_typed_from_the_schema() -> None:
    raw = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n007\n</parameter>\n"
        "<parameter=detailed>\ntrue\n</parameter>\n<parameter=hours>\n[1, 2]\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    r = parse("qwen3_coder_xml", raw)
    assert args(r) == [
        {"city": "Paris", "days": 3, "zip": "007", "detailed": True, "hours": [1, 2]}
    ]


def test_qwen3_coder_missing_closing_parameter_tags() -> None:
    raw = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n2\n"
        "</function>\n</tool_call>\nDone."
    )
    r = parse("qwen3_coder_xml", raw)
    assert args(r) == [{"city": "Paris", "days": 2}]
    assert r.content == "Done."


def test_qwen3_coder_several_functions_in_one_block() -> None:
    raw = (
        "<tool_call>\n<function=a>\n</function>\n<function=b>\n<parameter=k>\nv\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    r = parse("qwen3_coder_xml", raw, tools=())
    assert [(c.name, json.loads(c.arguments)) for c in r.calls] == [("a", {}), ("b", {"k": "v"})]


def test_hermes_arguments_before_name_and_negative_numbers() -> None:
    raw = (
        '<tool_call>\n{"arguments": {"days": -3, "city": "Oslo"}, "name": "get_weather"}\n'
        "</tool_call>"
    )
    r = parse("hermes_json", raw)
    assert [c.name for c in r.calls] == ["get_weather"]
    assert args(r) == [{"days": -3, "city": "Oslo"}]


def test_hermes_malformed_body_is_dropped_and_parsing_goes_on() -> None:
    raw = (
        '<tool_call>\n{"name": "get_weather", "arguments": {\'city\': \'Rome\'}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    r = parse("hermes_json", raw)
    assert args(r) == [{}, {"city": "Oslo"}]
    assert r.content == ""


def test_hermes_bare_json_that_is_not_a_call_stays_content() -> None:
    raw = '{"name": "Bob", "age": 3}'
    assert parse("hermes_json", raw).content == raw
    assert parse("hermes_json", raw, tools=()).content == raw


def test_truncated_calls_are_completed_to_valid_json() -> None:
    cases = {
        "hermes_json": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
        "qwen3_coder_xml": "<tool_call>\n<function=get_weather>\n<parameter=days>\n1",
        "deepseek_r1": (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            '```json\n{"hours": [1, 2'
        ),
        "mistral_args": '[TOOL_CALLS]get_weather[ARGS]{"city": "Par',
        "gpt_oss_harmony": (
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
            '{"city": "Par'
        ),
    }
    for fmt, raw in cases.items():
        r = parse(fmt, raw)
        assert [c.name for c in r.calls] == ["get_weather"], fmt
        assert r.calls[0].ended, fmt
        json.loads(r.calls[0].arguments)


def test_deepseek_r1_without_a_fence_and_several_calls() -> None:
    raw = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '{"city": "Paris"}<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>'
        'get_weather\n```json\n{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert args(parse("deepseek_r1", raw)) == [{"city": "Paris"}, {"city": "Rome"}]


def test_deepseek_r1_markers_inside_reasoning_are_text() -> None:
    raw = "I could write <｜tool▁calls▁begin｜> here.</think>Ok."
    r = parse("deepseek_r1", raw, thinking_open=True)
    assert r.reasoning == "I could write <｜tool▁calls▁begin｜> here." and r.calls == []


def test_mistral_args_marker_stripped_by_the_tokenizer() -> None:
    r = parse("mistral_args", 'Checking.[TOOL_CALLS]get_weather{"city": "Paris"}')
    assert r.content == "Checking." and args(r) == [{"city": "Paris"}]


def test_mistral_args_parallel_calls_with_ids() -> None:
    raw = (
        '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Paris"}'
        '[TOOL_CALLS]get_weather[CALL_ID]Zx9Yw8Vu7[ARGS]{"city": "Tokyo"}'
    )
    r = parse("mistral_args", raw)
    assert [c.id for c in r.calls] == ["a1B2c3D4e", "Zx9Yw8Vu7"]
    assert args(r) == [{"city": "Paris"}, {"city": "Tokyo"}]


def test_harmony_recipient_in_the_role_header_and_on_analysis() -> None:
    raw = (
        "<|channel|>analysis<|message|>Think.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Paris"}<|call|>'
    )
    r = parse("gpt_oss_harmony", raw)
    assert r.reasoning == "Think." and args(r) == [{"city": "Paris"}]
    raw = '<|channel|>analysis to=functions.get_weather<|message|>{"city": "Oslo"}'
    assert args(parse("gpt_oss_harmony", raw)) == [{"city": "Oslo"}]


HARMONY_LEADING_RECIPIENTS = [
    # What gpt-oss's own template renders after its generation prompt `<|start|>assistant`:
    # the recipient in the role header the prompt left open.
    ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
    ' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Paris"}',
    'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
]


@pytest.mark.parametrize("raw", HARMONY_LEADING_RECIPIENTS)
def test_harmony_recipient_opening_the_answer_is_a_call_on_every_split(raw: str) -> None:
    expected = parse("gpt_oss_harmony", raw).comparable(False)
    assert expected == ("", "", ((None, "get_weather", '{"city": "Paris"}', True),))
    for cut in range(1, len(raw)):
        for cuts in ([cut], [cut, cut + 1], [cut, cut + 7]):
            parser = get_parser("gpt_oss_harmony")(WEATHER)
            assert run(parser, split_at(raw, cuts)).comparable(False) == expected, cuts


def test_harmony_opening_recipient_is_held_back_until_a_marker_decides() -> None:
    parser = get_parser("gpt_oss_harmony")(WEATHER)
    assert parser.feed(" t") == [] and parser.feed("o=functions.get_") == []
    assert parser.feed("weather<|chan") == []
    assert parser.feed("nel|>commentary json<|message|>") != []  # the call starts here


@pytest.mark.parametrize(
    ("raw", "content"),
    [
        ("tomorrow<|channel|>final<|message|>Sunny.", "tomorrowSunny."),
        (" to be sure<|channel|>final<|message|>Sunny.", "to be sureSunny."),
        (" to=x\nnot a header<|channel|>final<|message|>Sunny.", "to=x\nnot a headerSunny."),
        (" to=", "to="),
        ("<|message|>stray", "<|message|>stray"),
    ],
)
def test_harmony_opening_text_that_is_no_recipient_is_content(raw: str, content: str) -> None:
    """(Leading whitespace of the content is dropped, as for every format.)"""
    r = parse("gpt_oss_harmony", raw)
    assert (r.content, r.calls) == (content, [])


def test_harmony_preamble_is_content_and_thinking_open_starts_in_analysis() -> None:
    raw = "<|channel|>commentary<|message|>Let me check.<|end|>"
    assert parse("gpt_oss_harmony", raw).content == "Let me check."
    r = parse(
        "gpt_oss_harmony",
        "still thinking<|end|><|start|>assistant<|channel|>final<|message|>4",
        thinking_open=True,
    )
    assert (r.reasoning, r.content) == ("still thinking", "4")


def test_generated_ids_are_unique_and_stable() -> None:
    raw = "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{}"
    r = parse("mistral_args", raw, tools=())
    assert len({c.id for c in r.calls}) == 2
    assert all(c.id.startswith("call_") for c in r.calls)


def test_a_call_without_a_name_is_no_call() -> None:
    r = parse("mistral_args", '[TOOL_CALLS][ARGS]{"a": 1}Then text.')
    assert r.calls == [] and r.content == "Then text."


def test_long_whitespace_runs_inside_content_are_kept() -> None:
    r = parse("hermes_json", "A" + "\n" * 500 + "B\n\n")
    assert r.content == "A" + "\n" * 500 + "B"


def test_double_encoded_arguments_that_are_not_json_give_an_empty_object() -> None:
    raw = '<tool_call>\n{"name": "get_weather", "arguments": "Paris"}\n</tool_call>'
    assert args(parse("hermes_json", raw)) == [{}]


def test_hermes_missing_closing_tag_then_stop_token_or_next_call() -> None:
    raw = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}<|im_end|>'
    r = parse("hermes_json", raw)
    assert args(r) == [{"city": "Paris"}] and r.content == ""
    raw = (
        '<tool_call>{"name": "get_weather", "arguments": {}}\n'
        '<tool_call>{"name": "get_weather", "arguments": {"days": 2}}</tool_call> Done.'
    )
    r = parse("hermes_json", raw)
    assert args(r) == [{}, {"days": 2}] and r.content == "Done."


def test_hermes_text_after_an_unclosed_call_is_content_from_its_first_character() -> None:
    """Regression: whitespace before the text was kept fed whole but dropped when it came
    in its own delta (`x\\n]` against `x]`)."""
    r = parse("hermes_json", 'x<tool_call>{"name": "get_weather", "arguments": {}}\n]')
    assert r.content == "x\n]" and args(r) == [{}]
    r = parse("hermes_json", '<tool_call>{"name": "get_weather", "arguments": {}}\n \n<|im_end|>')
    assert r.content == "" and args(r) == [{}]


def test_hermes_closing_tag_after_text_after_a_call_is_content() -> None:
    """Regression: once text follows a call the model has moved on, so a later
    `</tool_call>` is content like any other; fed whole it used to be dropped."""
    raw = 'x<tool_call>{"name": "get_weather", "arguments": {}}y</tool_call>z'
    r = parse("hermes_json", raw)
    assert r.content == "xy</tool_call>z" and args(r) == [{}]
    raw = '<tool_call>{"name": "get_weather", "arguments": {}}\n</tool_cx'
    assert parse("hermes_json", raw).content == "</tool_cx"


def test_hermes_bare_call_with_other_members_ends() -> None:
    """Regression: a strict bare envelope rejected after its call had started made the
    parser spin forever; the other members are now ignored, whatever their order."""
    for raw in (
        '{"name": "get_weather", "foo": 1}',
        '{"name": "get_weather", "arguments": {"days": 2}, "foo": [1, {"a": "}"}]}',
        '{"name": "get_weather", "foo": 1, "arguments": {"days": 2}} Done.',
    ):
        r = parse("hermes_json", raw)
        assert [c.name for c in r.calls] == ["get_weather"], raw
    assert args(parse("hermes_json", '{"name": "get_weather", "foo": 1}')) == [{}]
    r = parse("hermes_json", '{"name": "get_weather", "foo": 1, "arguments": {"days": 2}} Done.')
    assert args(r) == [{"days": 2}] and r.content == "Done."
    raw = '{"foo": 1, "name": "get_weather"}'  # decided before the call starts: content
    assert parse("hermes_json", raw).content == raw


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_hermes_call_boundaries_soup(data: st.DataObject) -> None:
    """What follows a call's JSON, in every chunking: closers, text, whitespace, the next
    call, stop tokens and bare envelopes, without the generic fuzz's other noise."""
    pool = [
        '<tool_call>{"name": "get_weather", "arguments": {}}',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a</tool_call>"}}',
        "<tool_call>",
        "</tool_call>",
        "</tool_c",
        "\n",
        " ",
        "x",
        "]",
        "<",
        "<think>",
        "</think>",
        "<|im_end|>",
        '{"name": "get_weather", "foo": 1}',
        '{"name": "get_weather"}',
        '{"name": 3}',
        '[{"name": "get_weather"}]',
    ]
    check_soup("hermes_json", pool, WEATHER, data)


def test_hermes_text_after_a_call_keeps_holding_a_split_stop_token() -> None:
    raw = '<tool_call>{"name": "get_weather", "arguments": {}} Done <|im_end|>'
    for cut in range(len(raw) + 1):
        parser = get_parser("hermes_json")(WEATHER)
        r = run(parser, [raw[:cut], raw[cut:]])
        assert r.content == "Done" and args(r) == [{}], cut
