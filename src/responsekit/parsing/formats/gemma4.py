"""`gemma4`: Gemma 4 (31B, E4B, …).

    <|channel>thought\\n…<channel|>text<|tool_call>call:NAME{city:<|"|>Paris<|"|>,n:-7}<tool_call|>

The arguments use Gemma's dict syntax: bare keys, strings between `<|"|>` quote tokens
(raw, not escaped, so `,` `:` `}` inside them are text), and JSON-like numbers,
`true`/`false`/`null`, `[…]` and nested `{…}`.  `GemmaArgs` turns that into JSON as it
streams; FunctionGemma (`functiongemma`) shares it with `<escape>` as the quote.
The call's end token is dropped wherever it shows, so text after a call whose end token
is missing is still content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, ClassVar

from responsekit.parsing.base import Handler
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {
    "true": "true",
    "false": "false",
    "null": "null",
    "True": "true",
    "False": "false",
    "None": "null",
}

# What the reader expects next.
_KEY = 0
_VALUE = 1
_AFTER = 2


def _scalar(token: str) -> str:
    """A bare value as JSON: a number or literal as written, anything else a string."""
    if _NUMBER.fullmatch(token):
        return token
    literal = _LITERALS.get(token)
    if literal:
        return literal
    if token.startswith('"'):
        try:
            value = json.loads(token)
        except ValueError:
            value = None
        if isinstance(value, str):
            token = value
    return json.dumps(token, ensure_ascii=False)


class GemmaArgs:
    """Reads one `{key:value,…}` argument object and writes it as JSON while it streams.

    What is emitted is always a healable prefix: a key is held until its value starts,
    a bare value (number, literal) until it ends, and a string streams as it arrives.
    `end` (the call's end token) closes whatever is still open.
    """

    __slots__ = (
        "_counts",
        "_end",
        "_in_string",
        "_inside",
        "_key",
        "_key_string",
        "_outside",
        "_phase",
        "_quote",
        "_stack",
        "_tok",
        "done",
    )

    def __init__(self, quote: str, end: str) -> None:
        self._quote = quote
        self._end = end
        self._outside = MarkerScanner((quote, end, "{", "}", "[", "]", ",", ":"))
        self._inside = MarkerScanner((quote, end))
        self._stack: list[str] = []  # closers of the open containers
        self._counts: list[int] = []  # members written per open container
        self._phase = _VALUE
        self._key: str | None = None
        self._tok: list[str] = []
        self._in_string = False
        self._key_string = False
        self.done = False

    def feed(self, text: str, pos: int = 0) -> tuple[str, int]:
        """Consume `text[pos:]` up to the end of the object; return the JSON to emit."""
        out: list[str] = []
        n = len(text)
        while pos < n and not self.done:
            if self._in_string:
                plain, marker, pos = self._inside.scan(text, pos)
                self._string_text(plain, out)
            else:
                plain, marker, pos = self._outside.scan(text, pos)
                if self._phase != _AFTER:
                    self._tok.append(plain)
            if marker:
                self._marker(marker, out)
        return "".join(out), pos

    def close(self) -> str:
        """End of stream: close what is open (`{}` if the object never started)."""
        if self.done:
            return ""
        out: list[str] = []
        if self._in_string and not self._key_string:
            out.append('"')
            self._in_string = False
            self._phase = _AFTER
        self._close_all(out)
        return "".join(out) or "{}"

    def _string_text(self, plain: str, out: list[str]) -> None:
        if self._key_string:
            self._tok.append(plain)
        elif plain:
            out.append(encode_basestring(plain)[1:-1])

    def _marker(self, marker: str, out: list[str]) -> None:
        if marker == self._end:
            if self._in_string and not self._key_string:
                out.append('"')
                self._phase = _AFTER
            self._in_string = False
            self._close_all(out)
        elif self._in_string:  # the closing quote
            self._in_string = False
            if not self._key_string:
                out.append('"')
                self._phase = _AFTER
        elif marker == self._quote:
            self._open_string(out)
        elif marker in "{[":
            if self._phase == _VALUE:
                self._tok.clear()
                out.append(self._member(marker))
                self._stack.append("}" if marker == "{" else "]")
                self._counts.append(0)
                self._phase = _KEY if marker == "{" else _VALUE
        elif marker in "}]":
            self._end_value(out)
            if self._stack:
                out.append(self._stack.pop())
                self._counts.pop()
                self.done = not self._stack
            self._phase = _AFTER
        elif marker == ",":
            self._end_value(out)
            if self._stack:
                self._phase = _KEY if self._stack[-1] == "}" else _VALUE
        elif self._phase == _KEY:  # ':' after a key
            self._key = "".join(self._tok).strip().strip('"')
            self._tok.clear()
            self._phase = _VALUE
        elif self._phase == _VALUE:  # ':' inside a bare value (`12:30`)
            self._tok.append(marker)

    def _open_string(self, out: list[str]) -> None:
        self._tok.clear()
        if self._phase == _KEY:
            self._in_string = self._key_string = True
        elif self._phase == _VALUE and self._stack:
            self._in_string = True
            self._key_string = False
            out.append(self._member('"'))

    def _end_value(self, out: list[str]) -> None:
        """A `,` or closer ends a bare value in progress (an empty one is dropped)."""
        token = "".join(self._tok).strip()
        self._tok.clear()
        if self._phase == _VALUE and token and self._stack:
            out.append(self._member(_scalar(token)))

    def _member(self, value: str) -> str:
        """`value` (JSON text) as the next member of the open container."""
        if not self._stack:
            return value
        prefix = ", " if self._counts[-1] else ""
        self._counts[-1] += 1
        if self._stack[-1] == "}":
            prefix += json.dumps(self._key or "", ensure_ascii=False) + ": "
        return prefix + value

    def _close_all(self, out: list[str]) -> None:
        self._end_value(out)
        out.extend(reversed(self._stack))
        self._stack.clear()
        self._counts.clear()
        self.done = True


class GemmaCallParser(TaggedParser):
    """Content with `<start>call:NAME{…}<end>` calls; subclasses name the tokens.

    `call_markers` holds the start token; `call_end` is also a stop token, so a stray
    one never shows.
    """

    call_end: ClassVar[str]
    quote: ClassVar[str]

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._name_end = MarkerScanner(("{", self.call_end))
        self._name: list[str] = []
        self._args = GemmaArgs(self.quote, self.call_end)

    def _call_handler(self, marker: str) -> Handler:
        self._name.clear()
        return self._call_name

    def _call_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker is None:
            return pos
        name = "".join(self._name).strip().removeprefix("call:").strip()
        self.out.start_call(name)
        if marker == "{":
            self._args = GemmaArgs(self.quote, self.call_end)
            self.handler = self._arguments
            return pos - 1
        self.out.args("{}")  # `call:NAME` and the end token: no arguments
        self.out.end_call()
        self.resume()
        return pos

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._args.feed(text, pos)
        self.out.args(emitted)
        if self._args.done:
            self.out.end_call()
            self.resume()  # the end token that follows is dropped as a stop token
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._args.close())


@register
class Gemma4Parser(GemmaCallParser):
    """`<|channel>thought` reasoning, content, then `<|tool_call>call:…` calls."""

    name = "gemma4"
    reasoning_open = "<|channel>thought"
    reasoning_close = "<channel|>"
    open_anywhere = True  # special tokens: never prose
    stop_tokens = ("<tool_call|>", "<|tool_response>", "<turn|>", "<eos>")
    call_markers = ("<|tool_call>",)
    call_end = "<tool_call|>"
    quote = '<|"|>'
