"""`minimax_m2`: MiniMax-M2, M2.1, M2.5.

    …reasoning\\n</think>\\n\\ntext\\n<minimax:tool_call>\\n<invoke name="NAME">
    <parameter name="K">V</parameter>\\n</invoke>\\n</minimax:tool_call>

The prompt ends with `<think>\\n`, so reasoning is forced open.  Values are bare text
typed by the tool schema (`ArgsWriter`), with one line break stripped on each side
(SGLang); a missing `</parameter>` is tolerated before the next `\\n<parameter` or
`\\n</invoke>`.  Names are read from the `name="…"` attribute.
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

_CLOSE = "</minimax:tool_call>"
_INVOKE = "<invoke name="
_INVOKE_END = "</invoke>"
_PARAM = "<parameter name="
_VALUE_ENDS = ("\n</parameter>", "</parameter>", "\n" + _PARAM, "\n" + _INVOKE_END)


def _attribute(text: str) -> str:
    """`"get_weather"` (or `'…'`, or bare) → `get_weather`."""
    return text.strip().strip("\"'").strip()


@register
class MiniMaxM2Parser(TaggedParser):
    """`<think>` reasoning (forced open), content, then `<minimax:tool_call>` blocks."""

    name = "minimax_m2"
    stop_tokens = ("[e~[",)
    call_markers = ("<minimax:tool_call>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._block = MarkerScanner((_INVOKE, _CLOSE))
        self._tag_end = MarkerScanner((">",))
        self._params = MarkerScanner((_PARAM, _INVOKE_END, _CLOSE))
        self._value_end = MarkerScanner(_VALUE_ENDS)
        self._text: list[str] = []
        self._args = ArgsWriter(ToolSchemas(), "")
        self._skip_newline = False

    def _call_handler(self, marker: str) -> Handler:
        return self._block_body

    def _block_body(self, text: str, pos: int) -> int:
        """Inside `<minimax:tool_call>`, between invokes."""
        _, marker, pos = self._block.scan(text, pos)
        if marker == _INVOKE:
            self._text.clear()
            self.handler = self._invoke_name
        elif marker:
            self.resume()
        return pos

    def _invoke_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._tag_end.scan(text, pos)
        self._text.append(plain)
        if marker:
            name = _attribute("".join(self._text))
            self.out.start_call(name)
            self._args = ArgsWriter(self.schemas, name)
            self.out.args(self._args.open())
            self.handler = self._parameters
        return pos

    def _parameters(self, text: str, pos: int) -> int:
        _, marker, pos = self._params.scan(text, pos)
        if marker == _PARAM:
            self._text.clear()
            self.handler = self._parameter_name
        elif marker:
            self._end_call()
            if marker == _CLOSE:  # `</invoke>` was missing
                self.resume()
        return pos

    def _parameter_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._tag_end.scan(text, pos)
        self._text.append(plain)
        if marker:
            self.out.args(self._args.begin(_attribute("".join(self._text))))
            self._skip_newline = True
            self.handler = self._value
        return pos

    def _value(self, text: str, pos: int) -> int:
        if self._skip_newline:
            self._skip_newline = False
            if text[pos] == "\n":
                return pos + 1
        plain, marker, pos = self._value_end.scan(text, pos)
        self.out.args(self._args.value(plain))
        if marker is None:
            return pos
        self.out.args(self._args.end())
        if marker == _VALUE_ENDS[2]:
            self._text.clear()
            self.handler = self._parameter_name
        elif marker == _VALUE_ENDS[3]:
            self._end_call()
        else:
            self.handler = self._parameters
        return pos

    def _end_call(self) -> None:
        self.out.args(self._args.close())
        self.out.end_call()
        self.handler = self._block_body

    def _finish_call(self) -> None:
        if self.out.open_call is not None:
            self._value_end.reset()  # a held `\n</para…` is the cut end marker
            self.out.args(self._args.close())
