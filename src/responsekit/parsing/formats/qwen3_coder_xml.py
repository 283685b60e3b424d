"""`qwen3_coder_xml`: Qwen3-Coder, Qwen3.5/3.6, Nemotron-3-Nano, Step-3.5-Flash.

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are bare text typed by the tool schema (`ArgsWriter`): exactly one newline is
stripped on each side, and a value ends only structurally (`\\n</parameter>`, or the next
`\\n<parameter=` / `\\n</function>` when `</parameter>` is missing), so markup such as
`</tool_call>` inside a value is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.schema import ToolSchemas
from responsekit.parsing.tagged import TaggedParser
from responsekit.parsing.xml_args import ArgsWriter, escape

_VALUE_ENDS = ("\n</parameter>", "</parameter>", "\n<parameter=", "\n</function>")


@register
class Qwen3CoderXmlParser(TaggedParser):
    """`<think>` reasoning, content, then `<tool_call><function=…>` XML blocks."""

    name = "qwen3_coder_xml"
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    call_markers = ("<tool_call>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._block = MarkerScanner(("<function=", "</tool_call>"))
        self._name_end = MarkerScanner((">",))
        self._params = MarkerScanner(("<parameter=", "</function>", "</tool_call>"))
        self._value_end = MarkerScanner(_VALUE_ENDS)
        self._value_stops = self._value_end.starts | STRING_STOPS  # JSON-escaping is a no-op
        self._name: list[str] = []
        self._args = ArgsWriter(ToolSchemas(), "")
        self._skip_newline = False

    def _call_handler(self, marker: str) -> Handler:
        return self._block_body

    def _block_body(self, text: str, pos: int) -> int:
        """Inside `<tool_call>`, outside a function: wait for `<function=`."""
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
            if marker == "</tool_call>":  # `</function>` was missing
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
        scan = self._value_end
        plain, marker, pos = scan.scan(text, pos)
        self.out.args(self._args.value(plain))
        if marker is None:
            if scan.resting and self._args.streaming:
                self.fast_lane(ARGS, self._value_stops, self._split_value)
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

    def _split_value(self, text: str) -> tuple[str, str] | None:
        """The fast lane of a streaming string value: its JSON text, up to a possible end.

        Every value end contains `</` or `<p`, and a cut one ends the text with `<` or
        a line break (`</par`, `\\n<p`, `\\n`): text with neither (`a < b`, `<div`, a
        line of code) is all value except a final line break, with no marker search.
        """
        if "<" in text and ("</" in text or "<p" in text or text[-1] == "<"):
            parts = self._value_end.split(text)
            return None if parts is None else (escape(parts[0]), parts[1])
        if text[-1] == "\n":
            return encode_basestring(text[:-1])[1:-1], "\n"
        return encode_basestring(text)[1:-1], ""

    def _end_call(self) -> None:
        self.out.args(self._args.close())
        self.out.end_call()
        self.handler = self._block_body

    def _finish_call(self) -> None:
        if self.out.open_call is not None:
            self._value_end.reset()  # a held `\n</para…` is the cut end marker
            self.out.args(self._args.close())
