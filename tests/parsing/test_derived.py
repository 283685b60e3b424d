"""The parser derived from a chat template reads back what the template renders
(docs/parsing.md, Templates no format knows: the derived parser)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.parsing import detect_format, get_parser
from responsekit.prompting.derive import TemplateSyntax, derive, reads_sample_call
from responsekit.prompting.derived_parser import derived_parser
from responsekit.prompting.templates import ChatTemplate, TemplateError

from .parsing_support import TEMPLATES_DIR, Folded, check_soup, load_cases, no_stalls, run
from .test_fuzz import COMMON

TOOLS = [
    {"type": "function", "function": {"name": name, "description": "Look something up.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "note": {"type": "string"}}, "required": ["city"]}}}
    for name in ("get_weather", "get_time")
]  # fmt: skip
USER = {"role": "user", "content": "What is the weather in Paris?"}
REASONING = "The user wants the weather; I should call the tool."
CALLS = (
    ("get_weather", {"city": "Paris", "days": 3, "note": 'say "hi" <b>'}),
    ("get_time", {"city": "Rome"}),
)
TEMPLATES = sorted(TEMPLATES_DIR.glob("*.jinja"))
UNREAD_BEFORE = ("GigaChat3-10B-A1.8B", "GigaChat3.1-10B-A1.8B", "unsloth-Apriel-1.5", "upstage-Solar-Open-100B",
                 "tencent-Hy3", "openbmb-MiniCPM5-1B")  # fmt: skip


def _call(index: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    # Nine alphanumeric characters: Mistral templates insist.
    return {
        "id": f"call{index:05d}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def rendered_turn(template: ChatTemplate, calls: int) -> tuple[str, str] | None:
    """(generation prompt, the assistant turn after it) for a turn with reasoning and
    `calls` calls, or None when the template cannot render it after its prompt."""
    message = {"role": "assistant", "content": "", "reasoning_content": REASONING,
               "tool_calls": [_call(i, *CALLS[i]) for i in range(calls)]}  # fmt: skip
    # A template that closes reasoning in the prompt unless asked (Hunyuan 3's default
    # `no_think`) renders the reasoning after its prompt only with thinking on.
    for options in ({}, {"reasoning_effort": "high"}):
        try:
            prompt = template.render([USER], TOOLS, add_generation_prompt=True, **options)
            full = template.render([USER, message], TOOLS, add_generation_prompt=False, **options)
        except TemplateError:
            continue
        if full.startswith(prompt) and CALLS[0][0] in full[len(prompt) :]:
            return prompt, full[len(prompt) :]
    return None


def parse(
    template: ChatTemplate, syntax: TemplateSyntax, prompt: str, text: str, chunks: list[str]
) -> Folded:
    cls = derived_parser(syntax)
    return run(cls(TOOLS, thinking_open=cls.thinking_open_in(prompt)), chunks)


def renderable() -> list[Path]:
    found = []
    for path in TEMPLATES:
        template = ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>")
        if rendered_turn(template, 1) is not None:
            found.append(path)
    return found


def writes_two_calls(path: Path) -> bool:
    turn = rendered_turn(ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>"), 2)
    return turn is not None and CALLS[1][0] in turn[1]


RENDERABLE = renderable()
ONE_CALL_PER_TURN = {
    "GigaChat3-10B-A1.8B", "GigaChat3.1-10B-A1.8B", "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
    "openai-gpt-oss-120b",  # one message per call, its recipient in the role header
}  # fmt: skip
"""Templates whose render of a two-call turn holds one call after the generation prompt."""
TWO_CALLS = [path for path in RENDERABLE if path.stem not in ONE_CALL_PER_TURN]
ONE_CALL_GAPS = {
    # Pythonic calls (`[get_weather(city='Paris')]`): not one of the derived shapes.
    "LFM2.5-8B-A1B": "pythonic calls",
}


def cases(paths: list[Path]) -> list[Any]:
    return [pytest.param(path, id=path.stem) for path in paths if path.stem not in ONE_CALL_GAPS]


@pytest.mark.parametrize("stem", ONE_CALL_GAPS)
def test_a_call_shape_not_derived_is_left_to_the_hand_written_format(stem: str) -> None:
    """A template whose calls are none of the derived shapes: the analysis claims no call shape
    (no wrong parser is derived from it), and the hand-written format its markers pick reads
    the call the template itself renders (tests/test_template_calls.py runs it end to end)."""
    template = ChatTemplate((TEMPLATES_DIR / f"{stem}.jinja").read_text(), bos_token="<s>", eos_token="</s>")
    syntax = derive(template)
    assert syntax.calls is None and syntax.sample_call
    fmt = detect_format(template=template.source)
    assert fmt is not None and reads_sample_call(get_parser(fmt), syntax)


def test_the_templates_that_write_one_call_per_turn() -> None:
    assert {path.stem for path in RENDERABLE if not writes_two_calls(path)} == ONE_CALL_PER_TURN


@pytest.mark.parametrize("path", cases(RENDERABLE))
def test_the_template_s_own_call_comes_back(path: Path) -> None:
    """Fed in one piece and character by character, the turn the template renders gives
    back its call with the same arguments, and its reasoning as reasoning."""
    template = ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>")
    syntax = derive(template)
    turn = rendered_turn(template, 1)
    assert turn is not None
    prompt, text = turn
    for chunks in ([text], list(text)):
        folded = parse(template, syntax, prompt, text, chunks)
        assert [(c.name, json.loads(c.arguments)) for c in folded.calls] == [CALLS[0]], (
            syntax,
            text,
        )
        assert CALLS[0][0] not in folded.content
        if REASONING in text:
            assert folded.reasoning == REASONING


@pytest.mark.parametrize("path", cases(TWO_CALLS))
def test_two_calls_come_back_when_the_template_writes_them(path: Path) -> None:
    template = ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>")
    turn = rendered_turn(template, 2)
    assert turn is not None
    prompt, text = turn
    syntax = derive(template)
    for chunks in ([text], list(text)):
        folded = parse(template, syntax, prompt, text, chunks)
        assert [(c.name, json.loads(c.arguments)) for c in folded.calls] == list(CALLS), (
            syntax,
            text,
        )


@pytest.mark.parametrize("stem", UNREAD_BEFORE)
def test_the_templates_no_format_read_are_renderable(stem: str) -> None:
    """The six templates no parser read before the derived one (gpt-oss aside) are among those
    tested above."""
    assert stem in {path.stem for path in RENDERABLE}
    assert stem not in ONE_CALL_GAPS


def _templates_by_format() -> dict[str, tuple[str, TemplateSyntax]]:
    """Per hand-written format, a template it matches, whose derived syntax has calls if
    any such template does."""
    found: dict[str, tuple[str, TemplateSyntax]] = {}
    for path in TEMPLATES:
        template = ChatTemplate(path.read_text(), eos_token="</s>")
        fmt = detect_format(template=template.source)
        if fmt is None:
            continue
        syntax = derive(template)
        if (syntax.calls and (fmt not in found or not found[fmt][1].calls)) or (
            syntax.reasoning and fmt not in found
        ):
            found[fmt] = (path.stem, syntax)
    return found


BY_FORMAT = _templates_by_format()
QUIRK = "a tolerance the hand-written format carries (why it wins under `auto`)"
DISAGREEMENTS = {
    "hermes_json/12-no-wrapper-bare-json-lenient": QUIRK,
    "mistral_json_array/03-space-after-marker-unicode-nested": QUIRK,
    "mistral_json_array/05-partial-args": QUIRK,
    "llama3_json/04-2-calls-semicolon-separated": QUIRK,
    "llama3_json/06-type-function-prefix-and-arguments-key": QUIRK,
    "deepseek_r1/05-alt-open-marker-tool-calls": QUIRK,
    "phi4_mini/02-array-2-calls": QUIRK,
    "phi4_mini/04-functools-variant": QUIRK,
    "mistral_args/02-reasoning-answer": "this template writes no [THINK]",
    "mistral_args/07-partial-args": "this template writes no [THINK]",
    "mistral_args/09-truncated-unclosed-think-final": "this template writes no [THINK]",
    "kimi_k2/02-thinking-answer": "Kimi-K2-Instruct writes no reasoning",
    "kimi_k2/03-thinking-content-2-parallel-calls-ids": "Kimi-K2-Instruct writes no reasoning",
    "apertus/03-reasoning-2-parallel-calls-short-form": "the template writes no reasoning",
    "command_r7b/01-response-block": "Cohere2MoE writes <|START_TEXT|>, the corpus R7B's <|START_RESPONSE|>",
    "command_r7b/03-thinking-response": "Cohere2MoE writes <|START_TEXT|>, the corpus R7B's <|START_RESPONSE|>",
    "granite_3/01-think-response-tags": "the Granite 3.3 template writes no calls, reasoning or response tags",
    "granite_3/02-2-parallel-calls": "the Granite 3.3 template writes no calls, reasoning or response tags",
    "granite_3/04-granite-3.2-thought-process-phrases": "the Granite 3.3 template writes no reasoning tags",
    "granite_3/05-partial-response-tag": "the Granite 3.3 template writes no response tags",
    "gpt_oss_harmony/02-analysis-commentary-tool-call": "Harmony's channels (hand-written)",
    "gpt_oss_harmony/07-final-json-constrain": "Harmony's channels (hand-written)",
    "gpt_oss_harmony/08-partial-args": "Harmony's channels (hand-written)",
    "lfm2_pythonic/02-content-then-2-calls": "pythonic calls",
    "lfm2_pythonic/05-json-array-variant": "pythonic calls",
    "lfm2_pythonic/06-partial-pythonic": "pythonic calls",
    "gemma4/03-content-2-parallel-calls": "Gemma 4's value syntax",
    "gemma4/04-typed-values": "Gemma 4's value syntax",
}
CORPUS = [case for case in load_cases() if case["format"] in BY_FORMAT]
AGREED = [pytest.param(case, id=case["id"]) for case in CORPUS if case["id"] not in DISAGREEMENTS]
DIFFERENT = [pytest.param(case, id=case["id"]) for case in CORPUS if case["id"] in DISAGREEMENTS]


def _both_readings(case: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The hand-written parser's reading of a corpus case, and the derived parser's, fed in
    one piece and character by character."""
    _, syntax = BY_FORMAT[case["format"]]
    finish = not case["partial"]
    thinking_open = case["thinking_forced_open"]
    reference = run(get_parser(case["format"])(case["tools"], thinking_open=thinking_open), [case["raw"]],
                    finish=finish)  # fmt: skip
    derived = derived_parser(syntax)
    readings = [run(derived(case["tools"], thinking_open=thinking_open), chunks, finish=finish).comparable(keep_ids=False)
                for chunks in ([case["raw"]], list(case["raw"]))]  # fmt: skip
    return reference.comparable(keep_ids=False), readings


@pytest.mark.parametrize("case", AGREED)
def test_the_derived_parser_agrees_with_the_hand_written_one_on_the_corpus(case: dict[str, Any]) -> None:
    """Where a hand-written format matches a template, the parser derived from that
    template reads the format's corpus case as the hand-written parser does."""
    reference, readings = _both_readings(case)
    assert readings == [reference, reference]


@pytest.mark.parametrize("case", DIFFERENT)
def test_where_the_derived_parser_reads_a_corpus_case_otherwise_it_is_documented(case: dict[str, Any]) -> None:
    """The cases of DISAGREEMENTS, each with its reason: a tolerance of the hand-written format
    (why it wins under `auto`) or text its template does not write. The derived parser reads
    them otherwise, but as it always does: the same in one piece as character by character."""
    reference, (whole, by_character) = _both_readings(case)
    assert whole == by_character
    assert whole != reference


def test_the_corpus_comparison_covers_most_formats() -> None:
    assert len(BY_FORMAT) >= 24
    assert len(AGREED) >= 80 and {case.values[0]["id"] for case in DIFFERENT} == set(DISAGREEMENTS)


SOUP_TEMPLATES = [*UNREAD_BEFORE, "Qwen3.5-4B", "Kimi-K2-Instruct", "Mistral-Small-3.2-24B-Instruct-2506",
                  "meta-llama-Llama-3.1-8B-Instruct", "deepseek-ai-DeepSeek-V3.2"]  # fmt: skip


def _soup_pool(syntax: TemplateSyntax) -> list[str]:
    """The derived markers (stripped and as rendered), the sentinels' pieces and JSON."""
    pool = [*COMMON, *syntax.stops, *filter(None, syntax.content), *(syntax.reasoning or ())]
    shape = syntax.calls
    if shape is not None:
        pool += [value for value in shape.rendered.values() if value]
        pool += [marker for marker in (shape.trigger, shape.name_close, shape.key_open, shape.key_close,
                                       shape.value_close, shape.call_close, shape.id_close) if marker]  # fmt: skip
    return pool


@pytest.mark.parametrize("stem", SOUP_TEMPLATES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fragment_soup(stem: str, data: st.DataObject) -> None:
    """Random soups of the derived markers: one piece, per character and random splits
    agree, nothing stalls, every call ends with valid JSON and a cut stream heals."""
    syntax = derive(ChatTemplate((TEMPLATES_DIR / f"{stem}.jinja").read_text(), eos_token="</s>"))
    check_soup(
        derived_parser(syntax),
        _soup_pool(syntax),
        TOOLS,
        data,
        leads=("", '{"name": "get_weather", '),
    )


def test_a_section_holding_no_call_is_left_as_content() -> None:
    """Apriel 1.5's `<tool_calls>[` followed by no JSON object: no call, no stall."""
    syntax = derive(ChatTemplate((TEMPLATES_DIR / "unsloth-Apriel-1.5.jinja").read_text()))
    with no_stalls():
        folded = run(derived_parser(syntax)(TOOLS), ["hi <tool_calls>[x y] more"])
    assert (folded.content, folded.calls) == ("hi x y] more", [])


def test_a_hand_written_format_is_checked_on_the_call_the_template_renders() -> None:
    """`hermes_json` matches Apriel 1.5 by the `<tool_call>` in its text, but does not read
    the `<tool_calls>[…]</tool_calls>` it writes; it reads Qwen 2.5's own calls."""
    apriel = derive(ChatTemplate((TEMPLATES_DIR / "unsloth-Apriel-1.5.jinja").read_text()))
    qwen = derive(ChatTemplate((TEMPLATES_DIR / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()))
    assert "<tool_calls>[" in apriel.sample_call
    assert not reads_sample_call(get_parser("hermes_json"), apriel)
    assert reads_sample_call(derived_parser(apriel), apriel)
    assert reads_sample_call(get_parser("hermes_json"), qwen)


def test_an_end_of_turn_marker_that_starts_the_call_marker_is_dropped_after_a_call() -> None:
    """GigaChat 3 ends the call's turn with `<|message_sep|>`, which also starts its call
    marker: after the call it is no text, however the stream is split."""
    syntax = derive(ChatTemplate((TEMPLATES_DIR / "GigaChat3-10B-A1.8B.jinja").read_text()))
    answer = '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris"}}<|message_sep|>\n\n'
    for pieces in ([answer], list(answer)):
        with no_stalls():
            folded = run(derived_parser(syntax)(TOOLS), pieces)
        assert folded.content.strip() == ""
        assert [(call.name, json.loads(call.arguments)) for call in folded.calls] == [
            ("get_weather", {"city": "Paris"})
        ]


UNSEEN_TEMPLATES = {
    # Name then JSON, with reasoning markers of its own.
    "name_json": """{%- for m in messages -%}
<|{{ m.role }}|>
{%- if m.role == 'assistant' -%}
{%- if m.reasoning_content %}<|reflect|>{{ m.reasoning_content }}<|/reflect|>{% endif -%}
{{ m.content }}
{%- for c in m.tool_calls or [] %}<|call|>{{ c.function.name }}<|args|>{{ c.function.arguments | tojson }}<|/call|>{% endfor -%}
{%- else %}{{ m.content }}{% endif -%}
<|eot|>
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif -%}""",
    # Attribute-style XML, all calls in one block.
    "key_value": """{%- for m in messages -%}
### {{ m.role }}
{%- if m.role == 'assistant' %}
{{ m.content }}
{%- if m.tool_calls %}
<calls>
{%- for c in m.tool_calls %}
<invoke tool="{{ c.function.name }}">
{%- for k, v in c.function.arguments.items() %}
<arg key="{{ k }}">{{ v }}</arg>
{%- endfor %}
</invoke>
{%- endfor %}
</calls>
{%- endif %}
{%- else %}
{{ m.content }}
{%- endif %}
[end]
{% endfor -%}
{%- if add_generation_prompt %}### assistant{% endif -%}""",
}


@pytest.mark.parametrize("style", UNSEEN_TEMPLATES)
def test_a_template_of_an_unseen_family_needs_no_code(style: str) -> None:
    """What the derived parser is for: a template in the common shape that no format and no other
    test knows gets its reasoning and calls parsed, streamed char by char."""
    template = ChatTemplate(UNSEEN_TEMPLATES[style])
    syntax = derive(template)
    assert syntax.calls is not None and syntax.calls.style == style, syntax
    assert detect_format(template=template.source) is None
    turn = rendered_turn(template, 2)
    assert turn is not None
    prompt, text = turn
    folded = parse(template, syntax, prompt, text, list(text))
    assert [(c.name, json.loads(c.arguments)) for c in folded.calls] == list(CALLS)
    if style == "name_json":
        assert syntax.reasoning == ("<|reflect|>", "<|/reflect|>")
        assert folded.reasoning == REASONING
