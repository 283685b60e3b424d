"""`phi4_mini`: Phi-4-mini-instruct.

    <|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}<|/tool_call|>
    <|tool_call|>[{"name": …, "arguments": …}, {…}]<|/tool_call|>
    functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]

llama.cpp's template writes one envelope per `<|tool_call|>` tag, and the model also
writes an array there; vLLM's phi4_mini_json parser expects `functools[…]` (its
example template asks for it), whose `[` opens the array and which has no closer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from responsekit.parsing.formats.pythonic import CallListParser
from responsekit.parsing.json_stream import JsonCallReader
from responsekit.parsing.pyliteral import CallItem, CallList
from responsekit.parsing.registry import register

_TAG = "<|tool_call|>"
_FUNCTOOLS = "functools["


@register
class Phi4MiniParser(CallListParser):
    """Content, then JSON calls in `<|tool_call|>` tags or after `functools[`; no reasoning."""

    name = "phi4_mini"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<|end|>", "<|endoftext|>", "<|/tool_call|>")
    call_markers = (_TAG, _FUNCTOOLS)
    call_closers: ClassVar[Mapping[str, str]] = {_TAG: "<|/tool_call|>"}

    def _call_list(self, marker: str | None) -> CallList:
        out = self.out

        def item(c: str) -> CallItem | None:
            return JsonCallReader(out) if c == "{" else None

        return CallList(out, item, unbracketed=True, opened=marker == _FUNCTOOLS)
