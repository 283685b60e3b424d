"""Formats with tag-delimited reasoning and marker-introduced tool calls.

Most formats are "reasoning between two tags, then content in which a marker starts a
tool-call region": `TaggedParser` does the reasoning/content part once (forced-open
thinking, the re-emitted opening tag, stop tokens, hold-back of split markers), and a
format module only declares its markers and supplies the handler that reads a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from responsekit.parsing.base import Handler, StreamParser
from responsekit.parsing.emit import REASONING, TEXT
from responsekit.parsing.markers import MarkerScanner


class TaggedParser(StreamParser):
    """Reasoning tags + content + tool-call markers; subclasses read the calls.

    Rules (docs/parsing.md, *The formats*): with `thinking_open` everything up to the first close
    tag is reasoning, and an opening tag the model repeats there is dropped; otherwise
    an opening tag opens reasoning only before any content (or anywhere, with
    `open_anywhere`, for special-token tags).  Stop tokens are dropped wherever they
    leak.  A call marker in content (and in reasoning with `calls_in_reasoning`) hands
    over to `_call_handler`; the call handler returns control with `resume()`.
    """

    reasoning_open: ClassVar[str | None] = "<think>"
    reasoning_close: ClassVar[str | None] = "</think>"
    open_anywhere: ClassVar[bool] = False
    stop_tokens: ClassVar[tuple[str, ...]] = ()
    call_markers: ClassVar[tuple[str, ...]] = ()
    calls_in_reasoning: ClassVar[bool] = False

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        cls = type(self)
        tags = (cls.reasoning_open, cls.reasoning_close)
        self._reasoning_scan = MarkerScanner(
            (*tags, *cls.stop_tokens, *(cls.call_markers if cls.calls_in_reasoning else ()))
        )
        self._content_scan = MarkerScanner(
            (cls.reasoning_open, *cls.call_markers, *cls.stop_tokens)
        )
        self._said_reasoning = False
        self._said_content = False
        self._resume: Handler = self._content
        self.handler = (
            self._reasoning if thinking_open and cls.reasoning_close else self._content_start
        )

    @classmethod
    def thinking_open_in(cls, prompt: str) -> bool:
        if not cls.reasoning_open:
            return False
        return prompt.rstrip().endswith(cls.reasoning_open.strip())

    def resume(self) -> None:
        """Go back to the reasoning or content the current call interrupted."""
        self.handler = self._resume

    def _content_start(self, text: str, pos: int) -> int:
        """Entry point of content; formats with a marker-less call form override it."""
        self.handler = self._content
        return pos

    def _reasoning(self, text: str, pos: int) -> int:
        scan = self._reasoning_scan
        plain, marker, pos = scan.scan(text, pos)
        if plain:
            self.out.reasoning(plain)
            self._said_reasoning = self._said_reasoning or not plain.isspace()
        if marker is None:
            if self._said_reasoning and scan.resting:
                self.fast_lane(REASONING, scan.starts, scan.split)
            return pos
        if marker == self.reasoning_close:  # before stop tokens: Solar's `<|end|>` is both
            self.handler = self._content_start
        elif marker in self.stop_tokens:
            return pos
        elif marker == self.reasoning_open:
            if self._said_reasoning:
                self.out.reasoning(marker)
                self._said_reasoning = True
        else:
            self._resume = self._reasoning
            self.handler = self._call_handler(marker)
        return pos

    def _content(self, text: str, pos: int) -> int:
        scan = self._content_scan
        plain, marker, pos = scan.scan(text, pos)
        if plain:
            self._content_text(plain)
        if marker is None:
            if self._said_content and scan.resting:
                self.fast_lane(TEXT, scan.starts, self._content_split)
            return pos
        if marker in self.stop_tokens:
            return pos
        if marker == self.reasoning_open:
            if self.open_anywhere or not (self._said_content or self.out.calls):
                self.handler = self._reasoning
            else:
                self.out.text(marker)
                self._said_content = True
        else:
            self._resume = self._content
            self.handler = self._call_handler(marker)
        return pos

    def _content_split(self, text: str) -> tuple[str, str] | None:
        """The content fast lane's split (see `StreamParser.fast_lane`)."""
        return self._content_scan.split(text)

    def _content_text(self, plain: str) -> None:
        """Content text the scanner released (formats that drop more from it override)."""
        self.out.text(plain)
        self._said_content = self._said_content or not plain.isspace()

    def _call_handler(self, marker: str) -> Handler:
        """The handler reading the call `marker` starts; formats with calls override."""
        raise NotImplementedError(f"{type(self).__name__} declares marker {marker!r}")

    def _finish(self) -> None:
        if self.handler == self._reasoning:
            self.out.reasoning(self._reasoning_scan.flush())
        elif self.handler == self._content:
            self._content_text(self._content_scan.flush())
        else:
            self._finish_call()

    def _finish_call(self) -> None:
        """The generation ended inside a call: complete its arguments."""
