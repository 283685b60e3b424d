"""`kimi_k2`: Kimi-K2-Instruct(-0905), K2-Thinking, K2.5.

    <think>…</think>text<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
    <|tool_call_argument_begin|>{json}<|tool_call_end|>…<|tool_calls_section_end|>

The call id the model writes (`functions.NAME:IDX`) is kept: the template renders tool
results as `## Return of functions.NAME:IDX`.  The name is the id without the
`functions.` prefix and the `:IDX` suffix, so names containing `.` or `:` survive.
K2-Thinking writes calls inside `<think>`: they are calls, and the reasoning around them
stays reasoning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.call_sections import CallSectionParser
from responsekit.parsing.registry import register

_SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
_CALL_BEGIN = "<|tool_call_begin|>"
_INDEX = re.compile(r":\d+$")


def _name_of(call_id: str) -> str:
    """`functions.get-price:0` → `get-price`; a bare `NAME` is its own name."""
    return _INDEX.sub("", call_id).removeprefix("functions.")


@register
class KimiK2Parser(CallSectionParser):
    """`<think>` reasoning and content, with call sections in either."""

    name = "kimi_k2"
    stop_tokens = ("<|im_end|>", "<|im_middle|>")
    call_markers = (*_SECTION_BEGIN, _CALL_BEGIN)
    calls_in_reasoning = True
    call_begin = _CALL_BEGIN
    args_begin = "<|tool_call_argument_begin|>"
    call_end = "<|tool_call_end|>"
    section_ends = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._ids: set[str] = set()

    def _start_call(self, header: str) -> None:
        """The header is the call id, kept if it has its index and is new (a repeated id,
        from a model restarting its count, would make two calls one)."""
        call_id = header.strip()
        keep = _INDEX.search(call_id) is not None and call_id not in self._ids
        self._ids.add(call_id)
        self.out.start_call(_name_of(call_id), call_id if keep else None)
