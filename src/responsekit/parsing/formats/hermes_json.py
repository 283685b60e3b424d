"""`hermes_json`: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Hermes, Qwen2.5/3, QwQ).

The call body is read by `JsonCallReader`, so `</tool_call>` inside an argument string
never ends the call.  Lenient forms: arguments double-encoded as a JSON string, and a
bare `{"name": …, "arguments": …}` answer with no wrapper when it names a declared tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS, JsonCallReader, string_split
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_WS = " \t\r\n"


@register
class HermesJsonParser(TaggedParser):
    """`<think>` reasoning, content, then `<tool_call>` JSON blocks."""

    name = "hermes_json"
    stop_tokens = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")
    call_markers = ("<tool_call>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._reader = JsonCallReader(self.out)
        self._close_scan = MarkerScanner(("</tool_call>",))
        self._after_scan = MarkerScanner(("</tool_call>", "<tool_call>", *self.stop_tokens))
        self._raw: list[str] = []

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
        """After the JSON: expect `</tool_call>`; other text means the model moved on."""
        plain, marker, pos = self._after_scan.scan(text, pos)
        if plain and not plain.isspace():
            self.resume()
            self.out.text(plain)
            self._said_content = True
            if marker is None:
                self._replay(self._after_scan.flush())
            elif marker == "<tool_call>":
                self.handler = self._call_handler(marker)
        elif marker == "<tool_call>":  # `</tool_call>` was left out
            self.handler = self._call_handler(marker)
        elif marker == "</tool_call>":
            self.resume()
        return pos

    def _skip_to_close(self, text: str, pos: int) -> int:
        """Malformed call body: drop it up to `</tool_call>`."""
        _, marker, pos = self._close_scan.scan(text, pos)
        if marker:
            self.resume()
        return pos

    def _content_start(self, text: str, pos: int) -> int:
        n = len(text)
        while pos < n and text[pos] in _WS:
            pos += 1
        if pos == n:
            return pos
        if text[pos] == "{" and self.schemas.names and not self.out.calls:
            self._reader = JsonCallReader(self.out, names=self.schemas.names, strict=True)
            self.handler = self._bare
        else:
            self.handler = self._content
        return pos

    def _bare(self, text: str, pos: int) -> int:
        """A leading `{`: a bare call if it is `{"name": <declared tool>, …}`, else content."""
        reader = self._reader
        start = pos
        pos = reader.feed(text, pos)
        if not reader.started:
            self._raw.append(text[start:pos])
            if reader.rejected or reader.failed or reader.done:
                self._release_raw()
            return pos
        if reader.failed:
            reader.close()
        if reader.done or reader.failed:
            self.out.end_call()
            self.handler = self._content
        return pos

    def _release_raw(self) -> None:
        self.out.text("".join(self._raw))
        self._raw.clear()
        self._said_content = True
        self.handler = self._content

    def _finish_call(self) -> None:
        if self.handler == self._bare and not self._reader.started:
            self._release_raw()
        elif self.handler in (self._call_body, self._bare):
            self._reader.close()
