"""`generic_json`: llama.cpp's fallback for templates without native tools (Gemma 2,
Phi-3.5, Command-R+ …), where a grammar forces the whole output to be one of

    {"tool_calls": [{"name": "f", "arguments": {…}, "id": "call_001"}, …]}
    {"tool_call": {"name": "f", "arguments": {…}}}
    {"response": "the answer"}

The response streams as content (decoded; a non-string response is shown as its JSON).
Parallel calls carry an `"id"` *after* their arguments, so each is announced once its
id is read (or its envelope ends): the arguments are held until then rather than
losing the model's id.  A single `tool_call` streams.  An output that is not such an
object (a model that ignored the grammar) is content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.formats.mistral_json_array import JsonCallArray
from responsekit.parsing.json_stream import JsonValueStreamer
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_WS = " \t\r\n"
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")


class JsonStringText:
    """Decodes a JSON string value as it streams, from after its opening quote."""

    __slots__ = ("_esc", "_high", "done")

    def __init__(self) -> None:
        self._esc: str | None = None  # an escape being read, after its backslash
        self._high = ""  # a decoded high surrogate waiting for its pair
        self.done = False

    def feed(self, text: str, pos: int = 0) -> tuple[str, int]:
        """Consume `text[pos:]` up to the closing quote; return the decoded text."""
        out: list[str] = []
        n = len(text)
        while pos < n and not self.done:
            if self._esc is None:
                end = pos
                while end < n and text[end] != '"' and text[end] != "\\":
                    end += 1
                if end > pos:
                    self._unpaired(out)
                    out.append(text[pos:end])
                if end == n:
                    return "".join(out), n
                self.done = text[end] == '"'
                if self.done:
                    self._unpaired(out)
                else:
                    self._esc = ""
                pos = end + 1
                continue
            esc = self._esc = self._esc + text[pos]
            pos += 1
            if esc[0] != "u":
                self._unpaired(out)
                out.append(_SIMPLE_ESCAPES.get(esc, esc))
                self._esc = None
            elif len(esc) == 5:
                self._esc = None
                self._code(int(esc[1:], 16) if _HEX.issuperset(esc[1:]) else 0xFFFD, out)
        return "".join(out), pos

    def _code(self, code: int, out: list[str]) -> None:
        if 0xDC00 <= code < 0xE000 and self._high:
            pair = (self._high + chr(code)).encode("utf-16", "surrogatepass")
            self._high = ""
            out.append(pair.decode("utf-16"))
            return
        self._unpaired(out)
        if 0xD800 <= code < 0xDC00:
            self._high = chr(code)
        else:
            out.append("\ufffd" if 0xDC00 <= code < 0xE000 else chr(code))

    def _unpaired(self, out: list[str]) -> None:
        if self._high:
            out.append("\ufffd")
            self._high = ""


@register
class GenericJsonParser(TaggedParser):
    """The grammar-forced JSON object: calls, one call, or a response; no reasoning."""

    name = "generic_json"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = (
        "<end_of_turn>",
        "<|end|>",
        "<|endoftext|>",
        "<|eot_id|>",
        "<|im_end|>",
        "<|END_OF_TURN_TOKEN|>",
    )

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._raw: list[str] | None = None  # the object's text until its first key decides
        self._key = JsonValueStreamer()
        self._key_text: list[str] = []
        self._calls = JsonCallArray(self.out)
        self._response = JsonStringText()
        self._value = JsonValueStreamer()

    def _content_start(self, text: str, pos: int) -> int:
        n = len(text)
        while pos < n and text[pos] in _WS:
            pos += 1
        if pos == n:
            return pos
        if text[pos] == "{":
            self._raw = ["{"]
            self.handler = self._member
            return pos + 1
        self.handler = self._content
        return pos

    def _held(self, text: str) -> None:
        if self._raw is not None:
            self._raw.append(text)

    def _give_back(self) -> None:
        """Not the grammar's object: what was read is content."""
        if self._raw is not None:
            self.out.text("".join(self._raw))
            self._raw = None
        self.handler = self._content

    def _member(self, text: str, pos: int) -> int:
        c = text[pos]
        if c in _WS or c == ",":
            self._held(c)
            return pos + 1
        if c == '"':
            self._key = JsonValueStreamer()
            self._key_text.clear()
            self.handler = self._member_key
            return pos
        if c == "}" and self._raw is None:
            self.handler = self._content
            return pos + 1
        self._give_back()
        return pos

    def _member_key(self, text: str, pos: int) -> int:
        start = pos
        emitted, pos = self._key.feed(text, pos)
        self._key_text.append(emitted)
        self._held(text[start:pos])
        if self._key.failed:
            self._give_back()
        elif self._key.done:
            self.handler = self._colon
        return pos

    def _colon(self, text: str, pos: int) -> int:
        c = text[pos]
        if c in _WS:
            self._held(c)
            return pos + 1
        key = json.loads("".join(self._key_text))
        if c != ":" or (
            self._raw is not None and key not in ("tool_calls", "tool_call", "response")
        ):
            self._give_back()
            return pos
        self._raw = None
        if key == "tool_calls" or key == "tool_call":
            self._calls = JsonCallArray(self.out, await_id=key == "tool_calls")
            self.handler = self._call_value
        elif key == "response":
            self.handler = self._response_start
        else:  # a further member: read and ignored
            self._value = JsonValueStreamer()
            self.handler = self._ignored
        return pos + 1

    def _call_value(self, text: str, pos: int) -> int:
        calls = self._calls
        pos = calls.feed(text, pos)
        if calls.done:
            self.handler = self._after_member
        elif calls.failed:
            self.handler = self._content
        return pos

    def _response_start(self, text: str, pos: int) -> int:
        c = text[pos]
        if c in _WS:
            return pos + 1
        if c == '"':
            self._response = JsonStringText()
            self.handler = self._response_text
            return pos + 1
        self._value = JsonValueStreamer()
        self.handler = self._response_json
        return pos

    def _response_text(self, text: str, pos: int) -> int:
        decoded, pos = self._response.feed(text, pos)
        self.out.text(decoded)
        if self._response.done:
            self.handler = self._after_member
        return pos

    def _response_json(self, text: str, pos: int) -> int:
        """A response that is not a string is shown as its JSON text."""
        emitted, pos = self._value.feed(text, pos)
        self.out.text(emitted)
        if self._value.done or self._value.failed:
            self.handler = self._after_member if self._value.done else self._content
        return pos

    def _ignored(self, text: str, pos: int) -> int:
        _, pos = self._value.feed(text, pos)
        if self._value.done or self._value.failed:
            self.handler = self._after_member if self._value.done else self._content
        return pos

    def _after_member(self, text: str, pos: int) -> int:
        c = text[pos]
        if c in _WS:
            return pos + 1
        if c == ",":
            self.handler = self._member
            return pos + 1
        self.handler = self._content
        return pos + 1 if c == "}" else pos

    def _finish_call(self) -> None:
        if self._raw is not None:
            self._give_back()
        elif self.handler == self._call_value:
            self._calls.close()
