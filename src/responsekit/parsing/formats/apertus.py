"""`apertus`: Apertus-8B/70B-Instruct-2509.

    <|inner_prefix|>thoughts<|inner_suffix|><|tools_prefix|>[{"get_weather": {"city": "Paris"}}, {…}]<|tools_suffix|>

Each call is the short form `{NAME: ARGS}`, not `{"name", "arguments"}`; an object with
several members is read as several calls.  The template keeps the deliberation block
open across tool calls (`<|inner_suffix|>` comes before the response), so calls inside
the reasoning are calls.  Thinking is forced open when the prompt ends with
`<|inner_prefix|>` (llama.cpp checks the prompt the same way).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.formats.pythonic import CallListParser
from responsekit.parsing.json_stream import JsonStringArgs, JsonValueStreamer
from responsekit.parsing.pyliteral import CallItem, CallList
from responsekit.parsing.registry import register

_WS = " \t\r\n"
_END = "<|tools_suffix|>"

# ShortCallReader states.
_OPEN, _MEMBER, _NAME, _COLON, _ARGS, _AFTER = range(6)


class ShortCallReader:
    """Reads `{"NAME": {args}, …}` and emits one call per member through `out`.

    The call starts once its arguments start (`{`, or a double-encoded `"…"`); other
    values break the object (`failed`).
    """

    __slots__ = ("_key", "_name", "_out", "_state", "_value", "done", "failed", "started")

    rejected = False

    def __init__(self, out: EventBuffer) -> None:
        self._out = out
        self._state = _OPEN
        self._key = JsonValueStreamer()
        self._name: list[str] = []
        self._value: JsonValueStreamer | JsonStringArgs | None = None
        self.done = False
        self.failed = False
        self.started = False

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the object ends or breaks; return the position."""
        n = len(text)
        while pos < n and not (self.done or self.failed):
            state = self._state
            if state == _NAME:
                emitted, pos = self._key.feed(text, pos)
                self._name.append(emitted)
                if self._key.failed:
                    self.failed = True
                elif self._key.done:
                    self._state = _COLON
                continue
            if state == _ARGS and self._value is not None:
                pos = self._feed_args(self._value, text, pos)
                continue
            c = text[pos]
            if c in _WS:
                pos += 1
            elif state == _OPEN and c == "{":
                self._state = _MEMBER
                pos += 1
            elif state == _MEMBER and c == '"':
                self._key = JsonValueStreamer()
                self._name.clear()
                self._state = _NAME
            elif state in (_MEMBER, _AFTER) and c == "}":
                self.done = True
                pos += 1
            elif state == _AFTER and c == ",":
                self._state = _MEMBER
                pos += 1
            elif state == _COLON and c == ":":
                self._state = _ARGS
                pos += 1
            elif state == _ARGS and c in '{"':
                name = json.loads("".join(self._name))
                if self._out.start_call(name if isinstance(name, str) else "") is not None:
                    self.started = True
                self._value = JsonValueStreamer() if c == "{" else JsonStringArgs()
            else:
                self.failed = True
        return pos

    def close(self) -> None:
        """End of stream inside the object: complete the arguments emitted so far."""
        if self._state == _ARGS and self._value is not None:
            self._out.args(self._value.close())

    def _feed_args(self, value: JsonValueStreamer | JsonStringArgs, text: str, pos: int) -> int:
        emitted, pos = value.feed(text, pos)
        self._out.args(emitted)
        if value.failed:
            self._out.args(value.close())
            self.failed = True
        elif value.done:
            self._out.end_call()
            self._value = None
            self._state = _AFTER
        return pos


@register
class ApertusParser(CallListParser):
    """Deliberation, content, and short-form JSON calls in `<|tools_prefix|>` tags."""

    name = "apertus"
    reasoning_open = "<|inner_prefix|>"
    reasoning_close = "<|inner_suffix|>"
    open_anywhere = True
    calls_in_reasoning = True
    stop_tokens = ("<|assistant_end|>", _END)
    call_markers = ("<|tools_prefix|>",)
    call_closers: ClassVar[Mapping[str, str]] = {"<|tools_prefix|>": _END}

    def _call_list(self, marker: str | None) -> CallList:
        out = self.out

        def item(c: str) -> CallItem | None:
            return ShortCallReader(out) if c == "{" else None

        return CallList(out, item, unbracketed=True)
