"""`functionary_v3_1`: functionary-*-v3.1 (Llama 3.1 with a `<function=…>` prompt).

    Let me check.<function=get_weather>{"city": "Paris"}</function><function=…>…</function>
    <|python_tag|>print(2 ** 10)                       → python({"code": "print(2 ** 10)"})

Text before the calls is content.  The arguments are scanned as JSON, so `</function>`
inside a string does not end them; a missing `</function>` is tolerated.  The model is
a Llama 3.1, so `<|python_tag|>` is read as in `llama3_json`, with raw code going to the
`python` tool as the functionary template names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.formats.llama3_json import Llama3JsonParser
from responsekit.parsing.json_stream import JsonValueStreamer
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register

_OPEN = "<function="
_CLOSE = "</function>"
_PYTHON_TAG = "<|python_tag|>"


@register
class FunctionaryV31Parser(Llama3JsonParser):
    """Content, then `<function=NAME>{json}</function>` calls or `<|python_tag|>` code."""

    name = "functionary_v3_1"
    call_markers = (_OPEN, _PYTHON_TAG)
    code_tool = "python"

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._name_end = MarkerScanner((">",))
        self._after = MarkerScanner((_CLOSE, *self.call_markers, *self.stop_tokens))
        self._name: list[str] = []
        self._gap: list[str] = []  # whitespace after the arguments
        self._json = JsonValueStreamer()

    def _call_handler(self, marker: str) -> Handler:
        if marker != _OPEN:
            return super()._call_handler(marker)
        self._name.clear()
        return self._function_name

    def _function_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker:
            self.out.start_call("".join(self._name).strip())
            self._json = JsonValueStreamer()
            self.handler = self._arguments
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
        """After the arguments: expect `</function>`; other text means the model moved on."""
        plain, marker, pos = self._after.scan(text, pos)
        if plain and not plain.isspace():  # from here on, as the content scanner reads it
            self.resume()
            self.out.text("".join(self._gap) + plain + (marker if marker == _CLOSE else ""))
            self._said_content = True
            if marker is None:
                self._replay(self._after.flush())
            elif marker in self.call_markers:
                self.handler = self._call_handler(marker)
            return pos
        if plain:
            self._gap.append(plain)  # dropped if a marker follows, else content
        if marker in self.call_markers:  # `</function>` was left out
            self.handler = self._call_handler(marker)
        elif marker:
            self.resume()
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._json.close())
        elif self.handler != self._after_call:  # there, only a cut marker is held
            super()._finish_call()
