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

from responsekit.parsing.base import Handler
from responsekit.parsing.json_stream import JsonValueStreamer
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
_SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
_CALL_BEGIN = "<|tool_call_begin|>"
_ARGS_BEGIN = "<|tool_call_argument_begin|>"
_CALL_END = "<|tool_call_end|>"
_INDEX = re.compile(r":\d+$")


def _name_of(call_id: str) -> str:
    """`functions.get-price:0` → `get-price`; a bare `NAME` is its own name."""
    return _INDEX.sub("", call_id).removeprefix("functions.")


@register
class KimiK2Parser(TaggedParser):
    """`<think>` reasoning and content, with call sections in either."""

    name = "kimi_k2"
    stop_tokens = ("<|im_end|>", "<|im_middle|>")
    call_markers = (*_SECTION_BEGIN, _CALL_BEGIN)
    calls_in_reasoning = True

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._section = MarkerScanner((_CALL_BEGIN, *_SECTION_END))
        self._id_end = MarkerScanner((_ARGS_BEGIN, _CALL_END, *_SECTION_END))
        self._tail = MarkerScanner((_CALL_END, _CALL_BEGIN, *_SECTION_END))
        self._id: list[str] = []
        self._ids: set[str] = set()
        self._json = JsonValueStreamer()
        self._bare = False  # a call begun without the section marker

    def _call_handler(self, marker: str) -> Handler:
        self._bare = marker == _CALL_BEGIN
        if self._bare:
            self._id.clear()
            return self._call_id
        return self._in_section

    def _in_section(self, text: str, pos: int) -> int:
        _, marker, pos = self._section.scan(text, pos)
        if marker == _CALL_BEGIN:
            self._id.clear()
            self.handler = self._call_id
        elif marker:
            self.resume()
        return pos

    def _call_id(self, text: str, pos: int) -> int:
        plain, marker, pos = self._id_end.scan(text, pos)
        self._id.append(plain)
        if marker == _ARGS_BEGIN:
            self._start("".join(self._id).strip())
        elif marker:  # no arguments marker: not a call
            self._after_call(marker)
        return pos

    def _start(self, call_id: str) -> None:
        # A repeated id (the model restarted its count) would make two calls one.
        keep = _INDEX.search(call_id) is not None and call_id not in self._ids
        self._ids.add(call_id)
        self.out.start_call(_name_of(call_id), call_id if keep else None)
        self._json = JsonValueStreamer()
        self.handler = self._arguments

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._json.feed(text, pos)
        self.out.args(emitted)
        if self._json.done or self._json.failed:
            self.out.args(self._json.close())
            self.out.end_call()
            self.handler = self._call_tail
        return pos

    def _call_tail(self, text: str, pos: int) -> int:
        """After the arguments: `<|tool_call_end|>` (anything else up to it is dropped)."""
        _, marker, pos = self._tail.scan(text, pos)
        if marker == _CALL_BEGIN:  # `<|tool_call_end|>` was left out
            self._id.clear()
            self.handler = self._call_id
        elif marker:
            self._after_call(marker)
        return pos

    def _after_call(self, marker: str) -> None:
        if marker in _SECTION_END or self._bare:
            self.resume()
        else:
            self.handler = self._in_section

    def _finish_call(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._json.close())
