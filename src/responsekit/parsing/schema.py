"""Type untyped argument text (XML-style formats) from the tools' JSON schemas.

Formats such as Qwen3-Coder, GLM, MiniMax or Seed-OSS write every value as bare text;
only the schema tells that `007` is a string but `7` an integer.  The rules follow
vLLM's and SGLang's `_convert_param_value`: the text `null` is null for any type, a
failed conversion falls back to the text itself (never an exception), and a parameter
missing from the schema stays a string.  anyOf/oneOf, type arrays, enums and local
`$ref`s are resolved.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

_JSON_LITERALS = {"true": True, "false": False, "null": None}


def _kind(type_name: str) -> str:
    t = type_name.lower()
    if t.startswith(("int", "uint", "long", "short", "unsigned")):
        return "integer"
    if t.startswith(("num", "float", "double", "decimal")):
        return "number"
    if t.startswith("bool"):
        return "boolean"
    if t in ("object", "dict", "map", "mapping"):
        return "object"
    if t in ("array", "list", "tuple", "sequence"):
        return "array"
    if t in ("null", "none"):
        return "null"
    return "string"


class ValueType:
    """The JSON types a parameter accepts, in schema order."""

    __slots__ = ("kinds",)

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds: tuple[str, ...] = tuple(dict.fromkeys(kinds)) or ("string",)

    @property
    def is_string(self) -> bool:
        """Text values are strings (possibly null): they can stream as they arrive."""
        return all(k in ("string", "null") for k in self.kinds)

    def convert(self, text: str) -> Any:
        """The typed value of `text`, falling back to `text` itself."""
        if text == "null":
            return None
        for kind in self.kinds:
            if kind != "string":
                value = _CONVERTERS[kind](text)
                if value is not _FAIL:
                    return value
        return text


_FAIL = object()


def _to_integer(text: str) -> Any:
    try:
        return int(text.strip())
    except ValueError:
        return _FAIL


def _to_number(text: str) -> Any:
    try:
        value = float(text.strip())
    except ValueError:
        return _FAIL
    if not math.isfinite(value):
        return _FAIL  # not representable in JSON
    return int(value) if value.is_integer() else value


def _to_boolean(text: str) -> Any:
    t = text.strip().lower()
    return True if t == "true" else False if t == "false" else _FAIL


def _to_container(kind: type) -> Any:
    def convert(text: str) -> Any:
        try:
            value = json.loads(text)
        except ValueError:
            try:
                value = ast.literal_eval(text.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return _FAIL
        if isinstance(value, tuple):
            value = list(value)
        return value if isinstance(value, kind) else _FAIL

    return convert


_CONVERTERS = {
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "object": _to_container(dict),
    "array": _to_container(list),
    "null": lambda text: _FAIL,  # only the text `null`, handled before
}

STRING = ValueType(("string",))


class ToolSchemas:
    """Parameter types of the request's tools, looked up by tool and parameter name."""

    __slots__ = ("_cache", "_params")

    def __init__(self, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        self._params: dict[str, Mapping[str, Any]] = {}
        for tool in tools:
            function = tool.get("function", tool)
            name = function.get("name")
            if isinstance(name, str):
                params = function.get("parameters")
                self._params[name] = params if isinstance(params, Mapping) else {}
        self._cache: dict[tuple[str, str], ValueType] = {}

    @property
    def names(self) -> frozenset[str]:
        """The declared tool names."""
        return frozenset(self._params)

    def param_type(self, tool: str, param: str) -> ValueType:
        """The type of `tool`'s parameter `param`; a string when unknown."""
        key = (tool, param)
        cached = self._cache.get(key)
        if cached is None:
            root = self._params.get(tool, {})
            props = root.get("properties")
            schema = props.get(param) if isinstance(props, Mapping) else None
            cached = ValueType(_kinds(schema, root, 0)) if isinstance(schema, Mapping) else STRING
            self._cache[key] = cached
        return cached


def _kinds(schema: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> list[str]:
    if depth > 16:
        return []
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        return _kinds(target, root, depth + 1) if isinstance(target, Mapping) else []
    kinds: list[str] = []
    declared = schema.get("type")
    if isinstance(declared, str):
        kinds.append(_kind(declared))
    elif isinstance(declared, list):
        kinds.extend(_kind(t) for t in declared if isinstance(t, str))
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, Mapping):
                    kinds.extend(_kinds(option, root, depth + 1))
    if not kinds and isinstance(schema.get("enum"), list):
        for value in schema["enum"]:
            kinds.append(_value_kind(value))
    if not kinds and "const" in schema:
        kinds.append(_value_kind(schema["const"]))
    if not kinds and "properties" in schema:
        kinds.append("object")
    if not kinds and "items" in schema:
        kinds.append("array")
    return kinds


def _value_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"
