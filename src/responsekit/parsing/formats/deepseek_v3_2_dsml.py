"""`deepseek_v3_2_dsml`: DeepSeek-V3.2 and V3.2-Speciale (DSML markup).

    REASONING</think>text\\n\\n<｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>\\n</｜DSML｜invoke>
    </｜DSML｜function_calls>

The `string` attribute types each value: `"true"` means raw text (not escaped, streamed
as a JSON string), `"false"` means JSON (held until complete, then parsed; text that is
not JSON stays a string).  Without the attribute the tool schema decides.  The thinking
prompt ends with `<think>` (also after tool results, as `\\n\\n<think>`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.schema import STRING, ToolSchemas, ValueType
from responsekit.parsing.tagged import TaggedParser
from responsekit.parsing.xml_args import ArgsWriter

_SECTION = "<｜DSML｜function_calls>"
_SECTION_END = "</｜DSML｜function_calls>"
_INVOKE = "<｜DSML｜invoke"
_INVOKE_END = "</｜DSML｜invoke>"
_PARAM = "<｜DSML｜parameter"
_PARAM_END = "</｜DSML｜parameter>"
_NAME = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""")
_STRING = re.compile(r"""\bstring\s*=\s*["']?(true|false)""", re.IGNORECASE)
_JSON = ValueType(("integer", "number", "boolean", "object", "array"))


def _name(header: str) -> str:
    found = _NAME.search(header)
    return next((g for g in found.groups() if g is not None), "").strip() if found else ""


class _AttributeTypes(ToolSchemas):
    """The schema's types, overridden by the `string` attribute of the current value."""

    __slots__ = ("_schemas", "string")

    def __init__(self, schemas: ToolSchemas) -> None:
        super().__init__()
        self._schemas = schemas
        self.string: bool | None = None

    def param_type(self, tool: str, param: str) -> ValueType:
        if self.string is None:
            return self._schemas.param_type(tool, param)
        return STRING if self.string else _JSON


@register
class DeepSeekV32DsmlParser(TaggedParser):
    """`<think>` reasoning, content, then a `<｜DSML｜function_calls>` block."""

    name = "deepseek_v3_2_dsml"
    stop_tokens = ("<｜end▁of▁sentence｜>",)
    call_markers = (_SECTION, _INVOKE)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._block = MarkerScanner((_INVOKE, _SECTION_END))
        self._tag_end = MarkerScanner((">",))
        self._params = MarkerScanner((_PARAM, _INVOKE_END, _SECTION_END))
        self._value_end = MarkerScanner((_PARAM_END,))
        self._header: list[str] = []
        self._types = _AttributeTypes(self.schemas)
        self._args = ArgsWriter(self._types, "")
        self._bare = False  # an invoke outside a function_calls block

    def _call_handler(self, marker: str) -> Handler:
        self._bare = marker == _INVOKE
        if self._bare:
            self._header.clear()
            return self._invoke_header
        return self._block_body

    def _block_body(self, text: str, pos: int) -> int:
        """Inside the function_calls block, between invokes."""
        _, marker, pos = self._block.scan(text, pos)
        if marker == _INVOKE:
            self._header.clear()
            self.handler = self._invoke_header
        elif marker:
            self.resume()
        return pos

    def _invoke_header(self, text: str, pos: int) -> int:
        plain, marker, pos = self._tag_end.scan(text, pos)
        self._header.append(plain)
        if marker:
            name = _name("".join(self._header))
            self.out.start_call(name)
            self._args = ArgsWriter(self._types, name)
            self.out.args(self._args.open())
            self.handler = self._parameters
        return pos

    def _parameters(self, text: str, pos: int) -> int:
        _, marker, pos = self._params.scan(text, pos)
        if marker == _PARAM:
            self._header.clear()
            self.handler = self._parameter_header
        elif marker:
            self.out.args(self._args.close())
            self.out.end_call()
            if marker == _SECTION_END or self._bare:
                self.resume()
            else:
                self.handler = self._block_body
        return pos

    def _parameter_header(self, text: str, pos: int) -> int:
        plain, marker, pos = self._tag_end.scan(text, pos)
        self._header.append(plain)
        if marker:
            header = "".join(self._header)
            string = _STRING.search(header)
            self._types.string = string.group(1).lower() == "true" if string else None
            self.out.args(self._args.begin(_name(header)))
            self.handler = self._value
        return pos

    def _value(self, text: str, pos: int) -> int:
        plain, marker, pos = self._value_end.scan(text, pos)
        self.out.args(self._args.value(plain))
        if marker:
            self.out.args(self._args.end())
            self.handler = self._parameters
        return pos

    def _finish_call(self) -> None:
        if self.out.open_call is not None:
            self._value_end.reset()  # a held `</｜DSML｜para…` is the cut end marker
            self.out.args(self._args.close())
