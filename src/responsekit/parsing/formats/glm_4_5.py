"""`glm_4_5`: GLM-4.5, 4.5-Air, 4.5V, 4.6.

    \\n<think>…</think>\\ntext\\n<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>

The template writes strings raw and everything else as JSON, so values are typed from
the tool schema (`ArgsWriter`); a value ends at `</arg_value>` and is kept verbatim.
A call without arguments is `<tool_call>NAME</tool_call>`, with no line break.  The
name ends at a line break or at the first tag, so GLM-4.7's form without line breaks
(`glm_4_7`) reads the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.schema import ToolSchemas
from responsekit.parsing.tagged import TaggedParser
from responsekit.parsing.xml_args import ArgsWriter

_CLOSE = "</tool_call>"
_KEY = "<arg_key>"
_KEY_END = "</arg_key>"
_VALUE = "<arg_value>"
_VALUE_END = "</arg_value>"


@register
class Glm45Parser(TaggedParser):
    """`<think>` reasoning, content, then `<tool_call>NAME<arg_key>…` blocks."""

    name = "glm_4_5"
    stop_tokens = ("<|user|>", "<|observation|>", "<|endoftext|>")
    call_markers = ("<tool_call>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._name_end = MarkerScanner(("\n", _KEY, _CLOSE))
        self._member_scan = MarkerScanner((_KEY, _CLOSE))
        self._key_end = MarkerScanner((_KEY_END,))
        self._value_start = MarkerScanner((_VALUE, _KEY, _CLOSE))
        self._value_end = MarkerScanner((_VALUE_END,))
        self._text: list[str] = []
        self._args = ArgsWriter(ToolSchemas(), "")

    def _call_handler(self, marker: str) -> Handler:
        self._text.clear()
        return self._call_name

    def _call_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._text.append(plain)
        if marker is None:
            return pos
        name = "".join(self._text).strip()
        if marker == "\n" and not name:  # a line break before the name
            return pos
        self.out.start_call(name)
        self._args = ArgsWriter(self.schemas, name)
        self.out.args(self._args.open())
        self._member_marker(marker)
        return pos

    def _members(self, text: str, pos: int) -> int:
        """Between arguments: the next `<arg_key>` or the end of the call."""
        _, marker, pos = self._member_scan.scan(text, pos)
        if marker:
            self._member_marker(marker)
        return pos

    def _member_marker(self, marker: str) -> None:
        if marker == _KEY:
            self._text.clear()
            self.handler = self._key
        elif marker == _CLOSE:
            self.out.args(self._args.close())
            self.out.end_call()
            self.resume()
        else:
            self.handler = self._members

    def _key(self, text: str, pos: int) -> int:
        plain, marker, pos = self._key_end.scan(text, pos)
        self._text.append(plain)
        if marker:
            self.out.args(self._args.begin("".join(self._text).strip()))
            self.handler = self._before_value
        return pos

    def _before_value(self, text: str, pos: int) -> int:
        """Between `</arg_key>` and `<arg_value>`."""
        _, marker, pos = self._value_start.scan(text, pos)
        if marker == _VALUE:
            self.handler = self._value
        elif marker:
            self._member_marker(marker)
        return pos

    def _value(self, text: str, pos: int) -> int:
        plain, marker, pos = self._value_end.scan(text, pos)
        self.out.args(self._args.value(plain))
        if marker:
            self.out.args(self._args.end())
            self.handler = self._members
        return pos

    def _finish_call(self) -> None:
        if self.out.open_call is not None:
            self._value_end.reset()  # a held `</arg_val…` is the cut end marker
            self.out.args(self._args.close())
