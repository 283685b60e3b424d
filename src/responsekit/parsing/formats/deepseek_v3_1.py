"""`deepseek_v3_1`: DeepSeek-V3.1, V3.1-Terminus, V3.2-Exp.

    REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}
    <｜tool▁call▁end｜><｜tool▁call▁begin｜>…<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Unlike R1 there is no `function` type and no code fence.  The thinking prompt ends with
`<think>` (forced open); the non-thinking one with `<think></think>` or `</think>`.

A call section written inside reasoning is undecided until `</think>` or the end of the
generation, so it is held: followed by `</think>` it was reasoning text (llama.cpp
vector); if the generation ends first, the model skipped closing its reasoning and the
section holds its calls (llama.cpp reads them too, though it then also moves the
reasoning before them to content, which a stream cannot take back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.json_stream import JsonValueStreamer
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_SECTION_BEGIN = "<｜tool▁calls▁begin｜>"
_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_SEP = "<｜tool▁sep｜>"
_CALL_END = "<｜tool▁call▁end｜>"
_SECTION_END = "<｜tool▁calls▁end｜>"


@register
class DeepSeekV31Parser(TaggedParser):
    """`<think>` reasoning, content, then the `NAME<｜tool▁sep｜>{json}` call section."""

    name = "deepseek_v3_1"
    stop_tokens = ("<｜end▁of▁sentence｜>",)
    call_markers = (_SECTION_BEGIN, _CALL_BEGIN)
    calls_in_reasoning = True  # held until decided, see the module docstring

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._section = MarkerScanner((_CALL_BEGIN, _SECTION_END))
        self._name_end = MarkerScanner((_SEP, _CALL_END, _SECTION_END))
        self._tail = MarkerScanner((_CALL_END, _CALL_BEGIN, _SECTION_END))
        self._name: list[str] = []
        self._json = JsonValueStreamer()
        self._bare = False  # a call begun without the section marker
        self._think_end = MarkerScanner((self.reasoning_close,))
        self._held: list[str] = []
        self._held_marker = ""

    def _call_handler(self, marker: str) -> Handler:
        if self._resume == self._reasoning:
            self._held_marker = marker
            return self._undecided
        return self._section_handler(marker)

    def _section_handler(self, marker: str) -> Handler:
        self._bare = marker == _CALL_BEGIN
        if self._bare:
            self._name.clear()
            return self._call_name
        return self._in_section

    def _in_section(self, text: str, pos: int) -> int:
        """Between calls: wait for the next call or the end of the section."""
        _, marker, pos = self._section.scan(text, pos)
        if marker == _CALL_BEGIN:
            self._name.clear()
            self.handler = self._call_name
        elif marker:
            self.resume()
        return pos

    def _call_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker == _SEP:
            self.out.start_call("".join(self._name).strip())
            self._json = JsonValueStreamer()
            self.handler = self._arguments
        elif marker:  # no separator: not a call
            self._after_call(marker)
        return pos

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._json.feed(text, pos)
        self.out.args(emitted)
        if self._json.done or self._json.failed:
            self.out.args(self._json.close())
            self.out.end_call()
            self.handler = self._call_tail
        return pos

    def _call_tail(self, text: str, pos: int) -> int:
        """After the arguments: `<｜tool▁call▁end｜>` (anything else up to it is dropped)."""
        _, marker, pos = self._tail.scan(text, pos)
        if marker == _CALL_BEGIN:  # `<｜tool▁call▁end｜>` was left out
            self._name.clear()
            self.handler = self._call_name
        elif marker:
            self._after_call(marker)
        return pos

    def _after_call(self, marker: str) -> None:
        if marker == _SECTION_END or self._bare:
            self.resume()
        else:
            self.handler = self._in_section

    def _finish_call(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._json.close())

    def _undecided(self, text: str, pos: int) -> int:
        """A call section inside reasoning, held until `</think>` shows it was reasoning."""
        plain, marker, pos = self._think_end.scan(text, pos)
        self._held.append(plain)
        if marker:
            self.out.reasoning(self._held_marker + "".join(self._held))
            self._held.clear()
            self.handler = self._content_start
        return pos

    def _finish(self) -> None:
        if self.handler == self._undecided:  # no `</think>`: the held section is calls
            held = "".join(self._held) + self._think_end.flush()
            self._held.clear()
            self._resume = self._content
            self.handler = self._section_handler(self._held_marker)
            self._replay(held)
        super()._finish()
