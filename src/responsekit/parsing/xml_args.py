"""Build a call's JSON arguments from key/value text (XML-style formats).

Formats like `<parameter=K>V</parameter>` or `<arg_key>K</arg_key><arg_value>V…` give
bare text per value.  `ArgsWriter` turns that into JSON *while it arrives*: a string
value streams as JSON-escaped fragments; any other type is held until the value ends,
then typed from the schema (`7` may still become `70`, and sglang#27005 shows what
streaming it early does).  Every emitted prefix is healable: closing the open string
and the object yields the arguments surfaced so far.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring

from responsekit.parsing.schema import ToolSchemas, ValueType


def escape(text: str) -> str:
    """`text` as the inside of a JSON string (`json.dumps(ensure_ascii=False)`, minus its overhead)."""
    return encode_basestring(text)[1:-1]


class ArgsWriter:
    """Writes `{"k": v, …}` for one call; each method returns the JSON text to emit."""

    __slots__ = ("_held", "_key", "_schemas", "_sep", "_streaming", "_tool", "_type")

    def __init__(self, schemas: ToolSchemas, tool: str) -> None:
        self._schemas = schemas
        self._tool = tool
        self._sep = ""
        self._key: str | None = None
        self._type: ValueType | None = None
        self._held: list[str] = []
        self._streaming = False  # a string value's opening quote has been emitted

    @property
    def streaming(self) -> bool:
        """A string value is streaming: more text is emitted as it is, JSON-escaped."""
        return self._streaming

    def open(self) -> str:
        """Start the object."""
        self._sep = ""
        return "{"

    def begin(self, key: str) -> str:
        """A value named `key` starts (ending one still open)."""
        out = self.end() if self._key is not None else ""
        self._key = key
        self._type = self._schemas.param_type(self._tool, key)
        self._held.clear()
        self._streaming = False
        return out

    def value(self, text: str) -> str:
        """More text of the current value."""
        if self._key is None or not text:
            return ""
        if self._streaming:
            return escape(text)
        self._held.append(text)
        if self._type is not None and self._type.is_string:
            held = "".join(self._held)
            if not "null".startswith(held):  # `null` means null even for strings
                self._held.clear()
                self._streaming = True
                return self._member() + '"' + escape(held)
        return ""

    def end(self) -> str:
        """The current value is complete."""
        value_type = self._type
        if self._key is None or value_type is None:
            return ""
        if self._streaming:
            out = '"'
        else:
            text = "".join(self._held)
            self._held.clear()
            value = value_type.convert(text) if text == "null" or not value_type.is_string else text
            out = self._member() + json.dumps(value, ensure_ascii=False)
        self._key = None
        return out

    def close(self) -> str:
        """End the object (ending a value still open)."""
        return self.end() + "}"

    def _member(self) -> str:
        out = f"{self._sep}{json.dumps(self._key, ensure_ascii=False)}: "
        self._sep = ", "
        return out
