"""`functionary_v3_2`: functionary-*-v3.2.

    all⏎Checking both cities.>>>get_weather⏎{"city": "Paris"}>>>python⏎print(1)

The output is segments `RECIPIENT⏎BODY` joined by `>>>`; the first has no `>>>`
because the generation prompt ends with it.  Recipient `all` is content; another name
followed by a JSON object is a call; `python` followed by anything else is raw code,
`python({"code": …})`.  A first line that is no recipient (or a tool whose body is no
JSON) is content as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.formats.llama3_json import escape
from responsekit.parsing.json_stream import JsonValueStreamer
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_SEP = ">>>"
_WS = " \t\r\n"
_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_CODE_TOOL = "python"


@register
class FunctionaryV32Parser(TaggedParser):
    """`>>>`-separated segments: `all` content, JSON calls and raw python; no reasoning."""

    name = "functionary_v3_2"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
    call_markers = (_SEP,)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._ends = MarkerScanner((_SEP, *self.stop_tokens))  # of raw code, or after a call
        self._gap: list[str] = []  # whitespace after a call's arguments
        self._name: list[str] = []  # the recipient being read (or a repeated `>>>`)
        self._recipient = ""
        self._json = JsonValueStreamer()

    def _content_start(self, text: str, pos: int) -> int:
        self.handler = self._call_handler(_SEP)  # the prompt ended with `>>>`
        return pos

    def _call_handler(self, marker: str) -> Handler:
        self._name.clear()
        return self._recipient_line

    def _recipient_line(self, text: str, pos: int) -> int:
        name = self._name
        n = len(text)
        while pos < n:
            c = text[pos]
            if c in _NAME and (not name or name[-1] != ">"):
                name.append(c)
            elif c == ">" and len(name) < 3 and all(ch == ">" for ch in name):
                name.append(c)
                if len(name) == 3:  # `>>>` repeated at the start: skip it
                    name.clear()
            elif c == "\n" and name and name[-1] != ">":
                self._recipient = "".join(name)
                self.handler = self._content if self._recipient == "all" else self._body_start
                return pos + 1
            else:  # not a recipient line: content as written
                self.handler = self._content
                self._replay("".join(name))
                return pos
            pos += 1
        return pos

    def _body_start(self, text: str, pos: int) -> int:
        n = len(text)
        while pos < n and text[pos] in _WS:
            pos += 1
        if pos == n:
            return pos
        if text[pos] == "{":
            self.out.start_call(self._recipient)
            self._json = JsonValueStreamer()
            self.handler = self._arguments
        elif self._recipient == _CODE_TOOL:
            self._open_code()
        else:
            self.handler = self._content
            self._replay(self._recipient + "\n")
        return pos

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._json.feed(text, pos)
        self.out.args(emitted)
        if self._json.done or self._json.failed:
            self.out.args(self._json.close())
            self.out.end_call()
            self._gap.clear()
            self.handler = self._after_call
        return pos

    def _after_call(self, text: str, pos: int) -> int:
        """Whitespace after a call is dropped before the next segment, else it is content."""
        plain, marker, pos = self._ends.scan(text, pos)
        if plain and not plain.isspace():
            self.resume()
            self.out.text("".join(self._gap) + plain)
            self._said_content = True
            if marker == _SEP:
                self.handler = self._call_handler(marker)
            elif marker is None:
                self._replay(self._ends.flush())
            return pos
        if plain:
            self._gap.append(plain)
        if marker == _SEP:
            self.handler = self._call_handler(marker)
        elif marker:
            self.resume()
        return pos

    def _open_code(self) -> None:
        self.out.start_call(_CODE_TOOL)
        self.out.args('{"code": "')
        self._ends.reset()
        self.handler = self._code

    def _code(self, text: str, pos: int) -> int:
        """Raw python, up to the next segment or a stop token."""
        plain, marker, pos = self._ends.scan(text, pos)
        self.out.args(escape(plain))
        if marker:
            self.out.args('"}')
            self.out.end_call()
            self.handler = self._call_handler(marker) if marker == _SEP else self._content
        return pos

    def _finish_call(self) -> None:
        handler = self.handler
        if handler == self._recipient_line:
            self.out.text("".join(self._name))
        elif handler == self._body_start:  # cut right after the recipient line
            if self._recipient == _CODE_TOOL:
                self._open_code()
            else:
                self.out.start_call(self._recipient)
                self.out.args("{}")
        elif handler == self._arguments:
            self.out.args(self._json.close())
        if self.handler == self._code:
            self.out.args(escape(self._ends.flush()) + '"}')
