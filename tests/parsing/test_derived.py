"""The parser derived from a chat template reads back what the template renders (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from responsekit.parsing.derive import TemplateSyntax, derive
from responsekit.parsing.derived_parser import derived_parser
from responsekit.templates import ChatTemplate, TemplateError

from .parsing_support import TEMPLATES_DIR, Folded, run

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
ISSUE_FAILURES = ("GigaChat3-10B-A1.8B", "GigaChat3.1-10B-A1.8B", "unsloth-Apriel-1.5", "upstage-Solar-Open-100B",
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


RENDERABLE = renderable()
ONE_CALL_GAPS = {
    # Pythonic calls (`[get_weather(city='Paris')]`): not one of the derived shapes.
    "LFM2.5-8B-A1B": "pythonic calls",
    # Mistral writes the call id after the name (`NAME[CALL_ID]id[ARGS]`).
    "Mistral-Small-3.2-24B-Instruct-2506": "the call id after the name",
}
KIMI = "a call index after the name (`functions.NAME:1`)"
TWO_CALL_GAPS = {**ONE_CALL_GAPS, "Kimi-K2-Instruct": KIMI, "Kimi-K2-Thinking": KIMI, "moonshotai-Kimi-K2": KIMI,
                 # Harmony writes each call as a message of its own, its recipient in the role
                 # header (the hand-written gpt_oss_harmony format reads it).
                 "openai-gpt-oss-120b": "one message per call"}  # fmt: skip


def cases(gaps: dict[str, str]) -> list[Any]:
    return [
        pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(strict=True, reason=gaps[path.stem])])
        if path.stem in gaps else pytest.param(path, id=path.stem)
        for path in RENDERABLE
    ]  # fmt: skip


@pytest.mark.parametrize("path", cases(ONE_CALL_GAPS))
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


@pytest.mark.parametrize("path", cases(TWO_CALL_GAPS))
def test_two_calls_come_back_when_the_template_writes_them(path: Path) -> None:
    template = ChatTemplate(path.read_text(), bos_token="<s>", eos_token="</s>")
    turn = rendered_turn(template, 2)
    if turn is None or CALLS[1][0] not in turn[1]:
        pytest.skip("the template writes one call per turn")
    prompt, text = turn
    syntax = derive(template)
    for chunks in ([text], list(text)):
        folded = parse(template, syntax, prompt, text, chunks)
        assert [(c.name, json.loads(c.arguments)) for c in folded.calls] == list(CALLS), (
            syntax,
            text,
        )


@pytest.mark.parametrize("stem", ISSUE_FAILURES)
def test_the_templates_the_issue_names_are_renderable(stem: str) -> None:
    """The six failures of issue 18 (gpt-oss aside) are among those tested above."""
    assert stem in {path.stem for path in RENDERABLE}
    assert stem not in TWO_CALL_GAPS
