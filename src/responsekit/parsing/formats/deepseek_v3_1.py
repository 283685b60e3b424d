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
from responsekit.parsing.call_sections import CallSectionParser
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register

_SECTION_BEGIN = "<｜tool▁calls▁begin｜>"
_CALL_BEGIN = "<｜tool▁call▁begin｜>"


@register
class DeepSeekV31Parser(CallSectionParser):
    """`<think>` reasoning, content, then the `NAME<｜tool▁sep｜>{json}` call section."""

    name = "deepseek_v3_1"
    stop_tokens = ("<｜end▁of▁sentence｜>",)
    call_markers = (_SECTION_BEGIN, _CALL_BEGIN)
    calls_in_reasoning = True  # held until decided, see the module docstring
    call_begin = _CALL_BEGIN
    args_begin = "<｜tool▁sep｜>"
    call_end = "<｜tool▁call▁end｜>"
    section_ends = ("<｜tool▁calls▁end｜>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._think_end = MarkerScanner((self.reasoning_close,))
        self._held: list[str] = []
        self._held_marker = ""

    def _call_handler(self, marker: str) -> Handler:
        if self._resume == self._reasoning:
            self._held_marker = marker
            return self._undecided
        return super()._call_handler(marker)

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
            self.handler = super()._call_handler(self._held_marker)
            self._replay(held)
        super()._finish()
