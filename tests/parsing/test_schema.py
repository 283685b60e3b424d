"""Schema typing of bare-text values, and the XML-style ArgsWriter."""

from __future__ import annotations

import json
from typing import Any

import pytest

from responsekit.parsing.schema import ToolSchemas
from responsekit.parsing.xml_args import ArgsWriter

from .parsing_support import heal

PROPS: dict[str, Any] = {
    "zip": {"type": "string"},
    "n": {"type": "integer"},
    "x": {"type": "number"},
    "flag": {"type": "boolean"},
    "obj": {"type": "object"},
    "items": {"type": "array"},
    "maybe": {"type": ["integer", "null"]},
    "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
    "ref": {"$ref": "#/$defs/Count"},
    "color": {"enum": ["red", "green"]},
    "level": {"enum": [1, 2, 3]},
    "opt_str": {"type": ["string", "null"]},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": PROPS,
                "$defs": {"Count": {"type": "int"}},
            },
        },
    }
]


@pytest.mark.parametrize(
    ("param", "text", "value"),
    [
        ("zip", "007", "007"),
        ("n", "42", 42),
        ("n", "-3", -3),
        ("n", "4x", "4x"),  # a failed conversion falls back to the text
        ("x", "1.5", 1.5),
        ("x", "2.0", 2),
        ("x", "1e400", "1e400"),
        ("flag", "true", True),
        ("flag", "False", False),
        ("flag", "yes", "yes"),
        ("obj", '{"a": [1, null]}', {"a": [1, None]}),
        ("obj", "{'a': True}", {"a": True}),
        ("obj", "[1]", "[1]"),
        ("items", "[1, 'b']", [1, "b"]),
        ("maybe", "null", None),
        ("maybe", "5", 5),
        ("either", "5", 5),
        ("either", "five", "five"),
        ("ref", "12", 12),
        ("level", "2", 2),
        ("color", "red", "red"),
        ("unknown", "3", "3"),  # not in the schema: stays a string
        ("zip", "null", None),  # `null` is null whatever the type
    ],
)
def test_values_are_typed_from_the_schema(param: str, text: str, value: Any) -> None:
    assert ToolSchemas(TOOLS).param_type("f", param).convert(text) == value


def test_string_like_types_stream() -> None:
    schemas = ToolSchemas(TOOLS)
    assert schemas.param_type("f", "zip").is_string
    assert schemas.param_type("f", "opt_str").is_string
    assert schemas.param_type("f", "color").is_string
    assert schemas.param_type("nope", "x").is_string
    assert not schemas.param_type("f", "either").is_string
    assert schemas.names == {"f"}


def write(pairs: list[tuple[str, list[str]]]) -> list[str]:
    writer = ArgsWriter(ToolSchemas(TOOLS), "f")
    pieces = [writer.open()]
    for key, chunks in pairs:
        pieces.append(writer.begin(key))
        for chunk in chunks:
            pieces.append(writer.value(chunk))
        pieces.append(writer.end())
    pieces.append(writer.close())
    return pieces


def test_string_values_stream_and_typed_values_wait_for_their_end() -> None:
    pieces = write([("zip", ["0", '07 "q"\n']), ("n", ["1", "2"]), ("flag", ["true"])])
    assert pieces[:4] == ["{", "", '"zip": "0', '07 \\"q\\"\\n']
    assert pieces[5:7] == ["", ""]  # `1`, then `12`: not emitted before the value ends
    text = "".join(pieces)
    assert json.loads(text) == {"zip": '007 "q"\n', "n": 12, "flag": True}
    surfaced = ""  # what a client has after each piece heals to valid JSON
    for piece in pieces[:-1]:
        surfaced += piece
        heal(surfaced)


def test_null_is_recognised_for_strings_too() -> None:
    assert json.loads("".join(write([("zip", ["nu", "ll"])]))) == {"zip": None}
    assert json.loads("".join(write([("zip", ["nu", "llish"])]))) == {"zip": "nullish"}
    assert json.loads("".join(write([("zip", [])]))) == {"zip": ""}
    assert "".join(write([])) == "{}"
