"""`llama3_json`: Llama 3.1/3.2/3.3 custom tools (also their builtin tools, see below).

    {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", …}
    <|python_tag|>{"name": …, "parameters": …}
    <|python_tag|>brave_search.call(query="…")<|eom_id|>
    <|python_tag|>import math⏎print(math.sqrt(2))

A custom-tool call is the whole message: a JSON object at the start of the output,
taken as a call when it names a declared tool (`"parameters"` or `"arguments"`, an
extra `"type": "function"` member is ignored), else content; calls are `;`-separated.
After `<|python_tag|>` come a JSON call, a builtin call `NAME.call(k="v")` or raw
Python, which becomes `code_interpreter({"code": …})` (docs/parsing.md, *The formats*).  The same
parser serves `llama3_builtin_python_tag`: one Llama 3 output may hold either kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, ClassVar

from responsekit.parsing.bare_json import BareJsonParser
from responsekit.parsing.base import Handler
from responsekit.parsing.json_stream import JsonCallReader
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.pyliteral import PythonCallReader
from responsekit.parsing.registry import register

_WS = " \t\r\n"
_HEAD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_PYTHON_TAG = "<|python_tag|>"


def escape(text: str) -> str:
    """`text` as the inside of a JSON string (raw code streamed as `{"code": "…"}`)."""
    return encode_basestring(text)[1:-1]


@register
class Llama3JsonParser(BareJsonParser):
    """Bare JSON calls, `<|python_tag|>` calls and raw code; no reasoning."""

    name = "llama3_json"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
    call_markers = (_PYTHON_TAG,)
    bare_strict = False  # `"type": "function"` may come before the name
    bare_separators = ";"
    code_tool: ClassVar[str] = "code_interpreter"
    """The tool raw code after `<|python_tag|>` is a call of."""

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._python = PythonCallReader(self.out)
        self._code_end = MarkerScanner(self.stop_tokens)
        self._head: list[str] = []  # what follows `<|python_tag|>`, until it is decided

    # After `<|python_tag|>`: a JSON call, `NAME.call(…)` or raw code.

    def _call_handler(self, marker: str) -> Handler:
        self._head.clear()
        return self._tagged

    def _tagged(self, text: str, pos: int) -> int:
        n = len(text)
        while pos < n and text[pos] in _WS and not self._head:
            pos += 1
        if pos == n:
            return pos
        c = text[pos]
        if c == "{" and not self._head:
            self._reader = JsonCallReader(self.out)
            self.handler = self._tagged_json
            return pos
        if c in _HEAD:
            self._head.append(c)
            return pos + 1
        head = "".join(self._head)
        if c == "(" and head.endswith(".call") and len(head) > 5:
            self._python = PythonCallReader(self.out)
            self._python.feed(head[:-5] + "(")
            self.handler = self._builtin
            return pos + 1
        self._open_code(head)
        return pos

    def _tagged_json(self, text: str, pos: int) -> int:
        reader = self._reader
        pos = reader.feed(text, pos)
        if reader.failed:
            reader.close()
            self.out.end_call()
            self.resume()
        elif reader.done:
            self.out.end_call()
            self.handler = self._between_calls
        return pos

    def _builtin(self, text: str, pos: int) -> int:
        call = self._python
        pos = call.feed(text, pos)
        if call.failed:  # after a complete value: `{…` needs only its brace
            self.out.args("}")
            self.out.end_call()
            self.resume()
        elif call.done:
            self.out.end_call()
            self.handler = self._between_calls
        return pos

    def _open_code(self, head: str) -> None:
        self.out.start_call(self.code_tool)
        self.out.args('{"code": "' + escape(head))
        self._code_end.reset()
        self.handler = self._code

    def _code(self, text: str, pos: int) -> int:
        """Raw code, up to a stop token or the end of the output."""
        plain, marker, pos = self._code_end.scan(text, pos)
        self.out.args(escape(plain))
        if marker:
            self.out.args('"}')
            self.out.end_call()
            self.resume()
        return pos

    def _finish_call(self) -> None:
        handler = self.handler
        if handler == self._tagged_json:
            self._reader.close()
        elif handler == self._builtin:
            self._python.close()
        elif handler == self._tagged and self._head:
            self._open_code("".join(self._head))
        else:
            super()._finish_call()
        if self.handler == self._code:
            self.out.args(escape(self._code_end.flush()) + '"}')
