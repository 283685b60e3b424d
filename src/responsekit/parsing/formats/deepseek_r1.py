"""`deepseek_r1`: DeepSeek-R1 / R1-0528 / V3-0324 and the R1 distills.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {…}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

The arguments are scanned as JSON, so backticks inside a string do not end them.  The
distills' look-alike markers (`<｜tool▁calls｜>`, `<｜tool_calls_begin｜>`, …) are accepted.
Inside reasoning, marker text is only text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS, JsonValueStreamer, string_split
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser


def _variants(*words: str) -> tuple[str, ...]:
    """The spellings distills use for `<｜w1▁w2｜>`: `▁`, `_`, ` ` or `\\_` between words."""
    return tuple(f"<｜{sep.join(words)}｜>" for sep in ("▁", "_", " ", "\\_"))


_SECTION_BEGIN = (*_variants("tool", "calls", "begin"), "<｜tool▁calls｜>")
_CALL_BEGIN = _variants("tool", "call", "begin")
_SEP = _variants("tool", "sep")
_CALL_END = _variants("tool", "call", "end")
_SECTION_END = _variants("tool", "calls", "end")


@register
class DeepSeekR1Parser(TaggedParser):
    """`<think>` reasoning (usually forced open), content, then the tool-call section."""

    name = "deepseek_r1"
    stop_tokens = ("<｜end▁of▁sentence｜>",)
    call_markers = (*_SECTION_BEGIN, *_CALL_BEGIN)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._section = MarkerScanner((*_CALL_BEGIN, *_SEP, *_SECTION_END))
        self._name_end = MarkerScanner(("\n", "{"))
        self._tail = MarkerScanner((*_CALL_END, *_SECTION_END, *_CALL_BEGIN, *_SEP))
        self._name: list[str] = []
        self._json = JsonValueStreamer()

    def _call_handler(self, marker: str) -> Handler:
        return self._in_section

    def _in_section(self, text: str, pos: int) -> int:
        """Between calls; the text before `<｜tool▁sep｜>` is the type (`function`)."""
        _, marker, pos = self._section.scan(text, pos)
        if marker in _SEP:
            self._name.clear()
            self.handler = self._call_name
        elif marker in _SECTION_END:
            self.resume()
        return pos

    def _call_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker:
            self.out.start_call("".join(self._name).strip())
            self._json = JsonValueStreamer()
            if marker == "{":  # no line break or fence before the arguments
                self.handler = self._arguments
                return pos - 1
            self.handler = self._fence
        return pos

    def _fence(self, text: str, pos: int) -> int:
        """Skip whitespace and an optional ```` ```json ```` line before the arguments."""
        n = len(text)
        while pos < n:
            c = text[pos]
            if c == "`":
                end = text.find("\n", pos)
                if end < 0:
                    self.handler = self._fence_line
                    return n
                pos = end + 1
            elif c in " \t\r\n":
                pos += 1
            else:
                self.handler = self._arguments
                return pos
        return pos

    def _fence_line(self, text: str, pos: int) -> int:
        end = text.find("\n", pos)
        if end < 0:
            return len(text)
        self.handler = self._fence
        return end + 1

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._json.feed(text, pos)
        self.out.args(emitted)
        if self._json.in_string:
            self.fast_lane(ARGS, STRING_STOPS, string_split)
        elif self._json.done or self._json.failed:
            self.out.args(self._json.close())
            self.out.end_call()
            self.handler = self._call_tail
        return pos

    def _call_tail(self, text: str, pos: int) -> int:
        """After the arguments: the closing fence and `<｜tool▁call▁end｜>`."""
        _, marker, pos = self._tail.scan(text, pos)
        if marker in _SECTION_END:
            self.resume()
        elif marker in _CALL_BEGIN:
            self.handler = self._in_section
        elif marker in _SEP:  # `<｜tool▁call▁end｜>` and the next begin were left out
            self._name.clear()
            self.handler = self._call_name
        elif marker:
            self.handler = self._in_section
        return pos

    def _finish_call(self) -> None:
        if self.handler in (self._fence, self._fence_line, self._arguments):
            self.out.args(self._json.close())
