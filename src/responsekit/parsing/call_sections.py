"""Special-token call sections: a header, a separator token, then JSON arguments.

DeepSeek-V3.1 (`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>`) and
Kimi-K2 (`<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{json}…`) write
the same structure with different tokens: `CallSectionParser` is its state machine once,
and a format declares its tokens and how a call's header starts the call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from responsekit.parsing.base import Handler
from responsekit.parsing.json_stream import JsonValueStreamer
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.tagged import TaggedParser


class CallSectionParser(TaggedParser):
    """Reads `call_markers` (`call_begin` HEADER `args_begin` {json} `call_end`)…
    one of `section_ends`.

    A call without `args_begin` is no call; anything between the arguments and
    `call_end` is dropped, and a missing `call_end` is tolerated before the next
    `call_begin`.  A call marker that is `call_begin` itself starts a call outside any
    section, which ends with it.
    """

    call_begin: ClassVar[str]
    args_begin: ClassVar[str]
    call_end: ClassVar[str]
    section_ends: ClassVar[tuple[str, ...]]

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        cls = type(self)
        ends = cls.section_ends
        self._section = MarkerScanner((cls.call_begin, *ends))
        self._header_end = MarkerScanner((cls.args_begin, cls.call_end, *ends))
        self._tail = MarkerScanner((cls.call_end, cls.call_begin, *ends))
        self._header: list[str] = []
        self._json = JsonValueStreamer()
        self._bare = False  # a call begun without the section marker

    def _start_call(self, header: str) -> None:
        """Start the call from the text between `call_begin` and `args_begin`."""
        self.out.start_call(header.strip())

    def _call_handler(self, marker: str) -> Handler:
        self._bare = marker == self.call_begin
        if self._bare:
            self._header.clear()
            return self._call_header
        return self._in_section

    def _in_section(self, text: str, pos: int) -> int:
        """Between calls: wait for the next call or the end of the section."""
        _, marker, pos = self._section.scan(text, pos)
        if marker == self.call_begin:
            self._header.clear()
            self.handler = self._call_header
        elif marker:
            self.resume()
        return pos

    def _call_header(self, text: str, pos: int) -> int:
        plain, marker, pos = self._header_end.scan(text, pos)
        self._header.append(plain)
        if marker == self.args_begin:
            self._start_call("".join(self._header))
            self._json = JsonValueStreamer()
            self.handler = self._arguments
        elif marker:  # no arguments marker: not a call
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
        """After the arguments: `call_end` (anything else up to it is dropped)."""
        _, marker, pos = self._tail.scan(text, pos)
        if marker == self.call_begin:  # `call_end` was left out
            self._header.clear()
            self.handler = self._call_header
        elif marker:
            self._after_call(marker)
        return pos

    def _after_call(self, marker: str) -> None:
        if marker in self.section_ends or self._bare:
            self.resume()
        else:
            self.handler = self._in_section

    def _finish_call(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._json.close())
