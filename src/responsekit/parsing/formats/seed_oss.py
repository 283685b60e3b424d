"""`seed_oss`: ByteDance Seed-OSS-36B.

    <seed:think>…<seed:cot_budget_reflect>…</seed:cot_budget_reflect>…</seed:think>text
    <seed:tool_call>\\n<function=NAME>\\n<parameter=K>V</parameter>\\n</function>\\n</seed:tool_call>

One `<seed:tool_call>` block per call (several functions in one block are read too).
Unlike Qwen3-Coder there is no line break after `<parameter=K>`; one is stripped on each
side if present.  Values are bare text typed by the tool schema (`ArgsWriter`); the
template writes non-strings with Python's `str`, which the typing also reads (`True`,
`['a']`).  Budget-reflection tags are part of the reasoning and kept there.
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

_CLOSE = "</seed:tool_call>"
_VALUE_ENDS = ("\n</parameter>", "</parameter>", "\n<parameter=", "\n</function>")


@register
class SeedOssParser(TaggedParser):
    """`<seed:think>` reasoning, content, then `<seed:tool_call><function=…>` blocks."""

    name = "seed_oss"
    reasoning_open = "<seed:think>"
    reasoning_close = "</seed:think>"
    stop_tokens = ("<seed:eos>",)
    call_markers = ("<seed:tool_call>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._block = MarkerScanner(("<function=", _CLOSE))
        self._name_end = MarkerScanner((">",))
        self._params = MarkerScanner(("<parameter=", "</function>", _CLOSE))
        self._value_end = MarkerScanner(_VALUE_ENDS)
        self._name: list[str] = []
        self._args = ArgsWriter(ToolSchemas(), "")
        self._skip_newline = False

    def _call_handler(self, marker: str) -> Handler:
        return self._block_body

    def _block_body(self, text: str, pos: int) -> int:
        """Inside `<seed:tool_call>`, outside a function."""
        _, marker, pos = self._block.scan(text, pos)
        if marker == "<function=":
            self._name.clear()
            self.handler = self._function_name
        elif marker:
            self.resume()
        return pos

    def _function_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker:
            name = "".join(self._name).strip()
            self.out.start_call(name)
            self._args = ArgsWriter(self.schemas, name)
            self.out.args(self._args.open())
            self.handler = self._parameters
        return pos

    def _parameters(self, text: str, pos: int) -> int:
        _, marker, pos = self._params.scan(text, pos)
        if marker == "<parameter=":
            self._name.clear()
            self.handler = self._parameter_name
        elif marker:
            self._end_call()
            if marker == _CLOSE:  # `</function>` was missing
                self.resume()
        return pos

    def _parameter_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker:
            self.out.args(self._args.begin("".join(self._name).strip()))
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
        if marker == "\n<parameter=":
            self._name.clear()
            self.handler = self._parameter_name
        elif marker == "\n</function>":
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
