"""`hermes_json`: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Hermes, Qwen2.5/3, QwQ).

The call body is read by `JsonCallReader`, so `</tool_call>` inside an argument string
never ends the call.  Lenient forms: arguments double-encoded as a JSON string, and a
bare `{"name": …, "arguments": …}` answer with no wrapper when it names a declared tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.bare_json import BareJsonParser
from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS, JsonCallReader, string_split
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register

_WS = " \t\r\n"


@register
class HermesJsonParser(BareJsonParser):
    """`<think>` reasoning, content, then `<tool_call>` JSON blocks (or one bare call)."""

    name = "hermes_json"
    stop_tokens = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")
    call_markers = ("<tool_call>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._close_scan = MarkerScanner(("</tool_call>",))
        self._after_scan = MarkerScanner(("</tool_call>", "<tool_call>", *self.stop_tokens))
        self._gap: list[str] = []  # whitespace after a call's JSON, until its fate is known

    def _call_handler(self, marker: str) -> Handler:
        self._reader = JsonCallReader(self.out)
        return self._call_body

    def _call_body(self, text: str, pos: int) -> int:
        reader = self._reader
        pos = reader.feed(text, pos)
        if reader.in_arguments_string:
            self.fast_lane(ARGS, STRING_STOPS, string_split)
        elif reader.done:
            self.out.end_call()
            self.handler = self._after_call
        elif reader.failed:
            reader.close()
            self.out.end_call()
            self.handler = self._skip_to_close
        return pos

    def _after_call(self, text: str, pos: int) -> int:
        """After the JSON: whitespace, then `</tool_call>` (or the next `<tool_call>`, or a
        stop token).  Anything else means the model moved on without closing the call:
        the text is content from its first character on, whitespace before it included,
        read by the content handler, so chunking cannot change how it is read."""
        scan = self._after_scan
        n = len(text)
        if scan.resting:
            start = pos
            while pos < n and text[pos] in _WS:
                pos += 1
            if pos > start:
                self._gap.append(text[start:pos])
            if pos == n:
                return pos
            if text[pos] not in scan.starts:
                self._move_on("")
                return pos
        while pos < n:  # a marker may be starting: step until it is decided (bounded)
            plain, marker, _ = scan.scan(text[pos])
            pos += 1
            if plain:
                self._move_on(plain + (marker or scan.flush()))
                break
            if marker is not None:
                self._gap.clear()
                if marker == "<tool_call>":  # `</tool_call>` was left out
                    self.handler = self._call_handler(marker)
                elif marker == "</tool_call>":
                    self.resume()
                break
        return pos

    def _move_on(self, seen: str) -> None:
        """Content follows the call: the held whitespace, then `seen` and the rest."""
        self.resume()
        self.out.text("".join(self._gap))
        self._gap.clear()
        self._replay(seen)

    def _skip_to_close(self, text: str, pos: int) -> int:
        """Malformed call body: drop it up to `</tool_call>`."""
        _, marker, pos = self._close_scan.scan(text, pos)
        if marker:
            self.resume()
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._call_body:
            self._reader.close()
        else:
            super()._finish_call()
