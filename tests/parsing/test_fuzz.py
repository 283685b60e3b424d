"""Robustness: any text made of a format's fragments parses without error, the same way
under any chunking, and every call finishes with valid JSON arguments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.parsing import available_formats

from .parsing_support import check_soup

COMMON = [
    "a",
    " ",
    "\n",
    "x y",
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    ":",
    ",",
    "-1",
    "2.5e3",
    "true",
    "null",
    '"k"',
    '"v"',
    "<",
    ">",
    "</",
    "é",
    "😀",
    "\\u00e9",
    "```",
    "```json\n",
]
FRAGMENTS = {
    "think_tags": ["<think>", "</think>", "<|im_end|>"],
    "hermes_json": [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "\n</tool_call>\n",
        "</tool_c",
        '{"name": "f", "arguments": ',
        '"arguments": ',
        '"name": "f"',
        "<|im_end|>",
        '{"name": "f", "arguments": {}}',
        '<tool_call>\n{"name": "f", "arguments": {"s": "v"}}',
        '{"name": "f", "arguments": {"n": -1}}\n',
        "\n]",
        "x</tool_call>",
        '{"name": "f", "foo": 1}',
        '{"name": "f"}',
        "<|endoftext|>",
    ],
    "qwen3_coder_xml": [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<function=f>",
        "</function>",
        "<parameter=n>",
        "<parameter=s>",
        "</parameter>",
        "\n</parameter>",
        "\n<parameter=s>",
        "\n</function>",
        "<|im_end|>",
    ],
    "deepseek_r1": [
        "<think>",
        "</think>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "function",
        "<｜tool▁sep｜>",
        "f\n",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁calls｜>",
        "<｜end▁of▁sentence｜>",
        '{"a": 1}',
    ],
    "mistral_args": [
        "[THINK]",
        "[/THINK]",
        "[TOOL_CALLS]",
        "f",
        "[ARGS]",
        "[CALL_ID]",
        "abc",
        "</s>",
        '{"a": 1}',
    ],
    "gpt_oss_harmony": [
        "<|start|>assistant",
        "<|channel|>",
        "analysis",
        "final",
        "commentary",
        " to=functions.f",
        " <|constrain|>json",
        "<|message|>",
        "<|end|>",
        "<|call|>",
        "<|return|>",
        '{"a": 1}',
        "<|endoftext|>",
    ],
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}},
        },
    }
]


def test_every_registered_format_is_fuzzed() -> None:
    """Each format's fragment soup lives here or beside its group's edge cases."""
    # Imported here: the group modules build on this one's pools.
    from .test_formats_group_a import FRAGMENTS_A
    from .test_formats_group_b import FRAGMENTS_B
    from .test_formats_group_c import FRAGMENTS_C

    fuzzed = [*FRAGMENTS, *FRAGMENTS_A, *FRAGMENTS_B, *FRAGMENTS_C]
    assert sorted(fuzzed) == sorted(available_formats())


@pytest.mark.parametrize("fmt", sorted(FRAGMENTS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fragment_soup(fmt: str, data: st.DataObject) -> None:
    check_soup(fmt, COMMON + FRAGMENTS[fmt], TOOLS, data)
