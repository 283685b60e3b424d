"""`deepseek_v3_2_dsml`: DeepSeek-V3.2 and V3.2-Speciale; `deepseek_v4_dsml`: DeepSeek-V4.

    REASONING</think>text\\n\\n<｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>\\n</｜DSML｜invoke>
    </｜DSML｜function_calls>

The `string` attribute types each value: `"true"` means raw text (not escaped, streamed
as a JSON string), `"false"` means JSON (held until complete, then parsed; text that is
not JSON stays a string).  Without the attribute the tool schema decides.  The thinking
prompt ends with `<think>` (also after tool results, as `\\n\\n<think>`).  An invoke
outside a function_calls block is read as a call too.

V4 writes the same markup in a `<｜DSML｜tool_calls>` block.  Both formats read
either block name; they differ in the one a grammar writes (`grammars.SYNTAXES`), so each
is its own format, told apart by the block name in the template (`parsing/detect.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.registry import register
from responsekit.parsing.schema import STRING, ToolSchemas, ValueType
from responsekit.parsing.xml_calls import XmlCallParser

_SECTION = "<｜DSML｜function_calls>"
_SECTION_CLOSE = "</｜DSML｜function_calls>"
_V4_SECTION = "<｜DSML｜tool_calls>"
_V4_SECTION_CLOSE = "</｜DSML｜tool_calls>"
_INVOKE = "<｜DSML｜invoke"
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
class DeepSeekV32DsmlParser(XmlCallParser):
    """`<think>` reasoning, content, then a `<｜DSML｜function_calls>` block."""

    name = "deepseek_v3_2_dsml"
    stop_tokens = ("<｜end▁of▁sentence｜>",)
    call_markers = (_SECTION, _V4_SECTION, _INVOKE)
    block_close = _SECTION_CLOSE
    other_block_closes = (_V4_SECTION_CLOSE,)
    function_open = _INVOKE
    function_close = "</｜DSML｜invoke>"
    param_open = "<｜DSML｜parameter"
    param_close = "</｜DSML｜parameter>"
    trim_newlines = False

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._attribute_types = _AttributeTypes(self.schemas)
        self._types = self._attribute_types

    def _call_name(self, header: str) -> str:
        return _name(header)

    def _param_name(self, header: str) -> str:
        """The name attribute; the `string` attribute types the value that follows."""
        string = _STRING.search(header)
        self._attribute_types.string = string.group(1).lower() == "true" if string else None
        return _name(header)


@register
class DeepSeekV4DsmlParser(DeepSeekV32DsmlParser):
    """V3.2's markup in a `<｜DSML｜tool_calls>` block: read alike, a grammar writes that block."""

    name = "deepseek_v4_dsml"
