"""`mistral_args`: tokenizer v11/v13 (Magistral, Mistral-Small-3.2, Devstral, Ministral-3).

    [THINK]…[/THINK]text[TOOL_CALLS]NAME[ARGS]{json}[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}

The name is only final once `[ARGS]` (or v11's `[CALL_ID]`) arrives, so it is held
until then.  Text with `[ARGS]` stripped as a special token (`NAME{json}`) is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS, JsonValueStreamer, string_split
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser


@register
class MistralArgsParser(TaggedParser):
    """`[THINK]` reasoning, content, and `[TOOL_CALLS]name[ARGS]json` calls."""

    name = "mistral_args"
    reasoning_open = "[THINK]"
    reasoning_close = "[/THINK]"
    open_anywhere = True
    stop_tokens = ("</s>",)
    call_markers = ("[TOOL_CALLS]",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._name_end = MarkerScanner(("[ARGS]", "[CALL_ID]", "{"))
        self._id_end = MarkerScanner(("[ARGS]", "{"))
        self._name: list[str] = []
        self._id: list[str] = []
        self._json = JsonValueStreamer()

    def _call_handler(self, marker: str) -> Handler:
        self._name.clear()
        self._id.clear()
        return self._call_name

    def _call_name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_end.scan(text, pos)
        self._name.append(plain)
        if marker == "[CALL_ID]":
            self.handler = self._call_id
        elif marker:
            return self._start(text, pos, marker)
        return pos

    def _call_id(self, text: str, pos: int) -> int:
        plain, marker, pos = self._id_end.scan(text, pos)
        self._id.append(plain)
        return self._start(text, pos, marker) if marker else pos

    def _start(self, text: str, pos: int, marker: str) -> int:
        self.out.start_call("".join(self._name).strip(), "".join(self._id).strip() or None)
        self._json = JsonValueStreamer()
        self.handler = self._arguments
        return pos - 1 if marker == "{" else pos

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._json.feed(text, pos)
        self.out.args(emitted)
        if self._json.in_string:
            self.fast_lane(ARGS, STRING_STOPS, string_split)
        elif self._json.done or self._json.failed:
            self.out.args(self._json.close())
            self.out.end_call()
            self.resume()
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._json.close())
