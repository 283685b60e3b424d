"""Bare JSON calls: output that opens with `{"name": …, "arguments": …}` and no marker.

Llama 3 writes its custom-tool calls so (`llama3_json`), Hermes models sometimes leave
out their `<tool_call>` wrapper (`hermes_json`), and a template may render its calls so
(the derived parser): `BareJsonParser` reads them once, and a format declares the keys,
the strictness and whether more calls may follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS, JsonCallReader, string_split
from responsekit.parsing.tagged import TaggedParser

_WS = " \t\r\n"


class BareJsonParser(TaggedParser):
    """Content opening with `{` (whitespace aside) is a call if it names a declared tool.

    The object's text is held until `JsonCallReader` decides: a declared tool's name
    starts the call, whose arguments then stream; anything else (another name, no
    object, with `bare_strict` another member first) makes the held text content.  No
    tools declared, no bare call: an answer that is JSON stays an answer.  `self._reader`
    is the format's for its other JSON calls too.
    """

    bare_name_keys: ClassVar[tuple[str, ...]] = ("name",)
    bare_args_keys: ClassVar[tuple[str, ...]] = ("arguments", "parameters")
    bare_strict: ClassVar[bool] = True
    """Only the name may come before the call starts (Llama 3's calls may carry
    `"type": "function"` first: not strict)."""
    bare_separators: ClassVar[str | None] = None
    """What may stand between bare calls besides whitespace (Llama 3's `;`); None: the
    output holds one bare call at most, and content follows it."""

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._reader = JsonCallReader(self.out)
        self._raw: list[str] = []  # the object's text until it is known to be a call
        self._separators = _WS + (self.bare_separators or "")

    def _content_start(self, text: str, pos: int) -> int:
        """Content's start: a bare call only if no call came before."""
        return self._call_or_content(text, pos, _WS, not self.out.calls)

    def _between_calls(self, text: str, pos: int) -> int:
        """After a call: whitespace and separators, then another bare call or content."""
        return self._call_or_content(text, pos, self._separators, True)

    def _call_or_content(self, text: str, pos: int, skip: str, bare: bool) -> int:
        """Past the characters in `skip`: a `{` opens a bare call (when `bare`), anything
        else is content."""
        n = len(text)
        while pos < n and text[pos] in skip:
            pos += 1
        if pos < n:
            if bare and text[pos] == "{" and self.schemas.names:
                self._raw.clear()
                self._reader = JsonCallReader(
                    self.out,
                    name_keys=self.bare_name_keys,
                    args_keys=self.bare_args_keys,
                    names=self.schemas.names,
                    strict=self.bare_strict,
                )
                self.handler = self._bare
            else:
                self.handler = self._content
        return pos

    def _bare(self, text: str, pos: int) -> int:
        """A leading `{`: a call if it is `{"name": <declared tool>, …}`, else content."""
        reader = self._reader
        start = pos
        pos = reader.feed(text, pos)
        if not reader.started:
            self._raw.append(text[start:pos])
            if reader.rejected or reader.failed or reader.done:
                self._release_raw()
            return pos
        return self._streamed(pos, self._content if self.bare_separators is None else self._between_calls)

    def _streamed(self, pos: int, after: Handler) -> int:
        """Once `self._reader` has read up to `pos` of a started call: its argument strings go
        through the fast lane; at the object's end (or where it broke, closed as it stands) the
        call ends and `after` reads on."""
        reader = self._reader
        if reader.in_arguments_string:
            self.fast_lane(ARGS, STRING_STOPS, string_split)
        elif reader.done or reader.failed:
            if reader.failed:
                reader.close()
            self.out.end_call()
            self.handler = after
        return pos

    def _release_raw(self) -> None:
        """A leading `{` that is no call: the text read so far is content."""
        self.out.text("".join(self._raw))
        self._raw.clear()
        self._said_content = True
        self.handler = self._content

    def _finish_call(self) -> None:
        if self.handler == self._bare:
            if self._reader.started:
                self._reader.close()
            else:
                self._release_raw()
