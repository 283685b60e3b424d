"""`mistral_json_array`: tokenizer v3/v7 (Mistral-7B-v0.3, Mixtral-8x22B, Nemo, Small-3.1).

    text[TOOL_CALLS][{"name": "f", "arguments": {…}, "id": "a1B2c3D4e"}, {…}]

Also home of the reader shared by the other formats that write a JSON array of call
envelopes after a marker (FireFunction v2, Command-R7B, Granite 3): `JsonCallArray` and
`CallArrayParser`.

Nemo writes each call's `"id"` *after* its arguments, and a `ToolCallStart` carries the
id, so with `await_id` a call is announced only once its id is read (or its envelope
ends without one): the arguments are held until then rather than losing the model's id.
Mistral's templates require 9-character alphanumeric ids in the history, so generated
ids have that shape too.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

from responsekit.canonical.events import ToolCallDelta
from responsekit.parsing.base import Handler
from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.json_stream import JsonCallReader
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_WS = " \t\r\n"
_ALNUM = string.ascii_letters + string.digits

# JsonCallArray states.
_OPEN = 0  # before `[` (or a bare `{`)
_ITEM = 1  # after `[` or `,`: an envelope or `]`
_IN = 2  # inside an envelope
_NEXT = 3  # after an envelope: `,` or `]`


class JsonCallArray:
    """Reads `[{envelope}, {envelope}, …]`, one tool call per envelope.

    A bare envelope with no brackets is read as a one-element array.  Stops right after
    the array (`done`) or at the character that breaks it (`failed`; a call in progress
    is ended with its arguments completed).
    """

    __slots__ = (
        "_await_id",
        "_bare",
        "_keys",
        "_new_id",
        "_out",
        "_reader",
        "_relaying",
        "_sink",
        "_state",
        "done",
        "failed",
    )

    def __init__(
        self,
        out: EventBuffer,
        *,
        name_keys: Collection[str] = ("name",),
        args_keys: Collection[str] = ("arguments", "parameters"),
        id_keys: Collection[str] = ("id",),
        await_id: bool = False,
        new_id: Callable[[], str | None] = lambda: None,
        opened: bool = False,
    ) -> None:
        self._out = out
        self._keys = (name_keys, args_keys, id_keys)
        self._await_id = await_id
        self._new_id = new_id
        self._state = _ITEM if opened else _OPEN
        self._bare = False
        self._sink = out
        self._reader = JsonCallReader(out)
        self._relaying = False
        self.done = False
        self.failed = False

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the array ends or breaks; return the position."""
        n = len(text)
        while pos < n and not (self.done or self.failed):
            state = self._state
            if state == _IN:
                pos = self._feed_call(text, pos)
                continue
            c = text[pos]
            if c in _WS:
                pos += 1
            elif c == "{" and state in (_OPEN, _ITEM):
                self._bare = state == _OPEN
                self._open_call()
            elif c == "[" and state == _OPEN:
                self._state = _ITEM
                pos += 1
            elif c == "]" and state in (_ITEM, _NEXT):  # also `[]` and a trailing comma
                self.done = True
                pos += 1
            elif c == "," and state == _NEXT:
                self._state = _ITEM
                pos += 1
            else:
                self.failed = True
        return pos

    def close(self) -> None:
        """End of stream inside the array: complete the call in progress."""
        if self._state == _IN and not (self.done or self.failed):
            self._reader.close()
            self._relay(final=True)
            self._out.end_call()
            self._state = _NEXT

    def _open_call(self) -> None:
        name_keys, args_keys, id_keys = self._keys
        self._sink = EventBuffer() if self._await_id else self._out
        self._relaying = False
        self._reader = JsonCallReader(
            self._sink, name_keys=name_keys, args_keys=args_keys, id_keys=id_keys
        )
        self._state = _IN

    def _feed_call(self, text: str, pos: int) -> int:
        reader = self._reader
        pos = reader.feed(text, pos)
        if reader.failed:
            reader.close()
        ended = reader.done or reader.failed
        self._relay(final=ended)
        if ended:
            self._out.end_call()
            if reader.failed:
                self.failed = True
            elif self._bare:
                self.done = True
            else:
                self._state = _NEXT
        return pos

    def _relay(self, *, final: bool) -> None:
        """With `await_id`: pass the held call on once its id is known (or never will be)."""
        if not self._await_id:
            return
        reader = self._reader
        if not self._relaying:
            if not reader.started or not (final or reader.call_id is not None):
                return
            self._relaying = True
            self._out.start_call(reader.name or "", reader.call_id or self._new_id())
        for event in self._sink.take():
            if isinstance(event, ToolCallDelta):
                self._out.args(event.arguments)


class CallArrayParser(TaggedParser):
    """Content, then a call marker followed by a JSON array of call envelopes.

    Subclasses declare the markers (`TaggedParser`) and the envelope's keys.  After the
    array, text is content again.  A broken array ends the call in progress; the text
    from the offending character on is content, or is dropped up to `region_end` for
    formats that close the call region.
    """

    name_keys: ClassVar[tuple[str, ...]] = ("name",)
    args_keys: ClassVar[tuple[str, ...]] = ("arguments", "parameters")
    id_keys: ClassVar[tuple[str, ...]] = ("id",)
    await_id: ClassVar[bool] = False
    marker_opens_array: ClassVar[bool] = False  # the marker ends with the `[`
    region_end: ClassVar[str | None] = None

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._array = JsonCallArray(self.out)
        self._region_scan = MarkerScanner((self.region_end,))

    def _new_id(self) -> str | None:
        """The id of a call the model wrote none for (None: the default `call_…`)."""
        return None

    def _call_handler(self, marker: str) -> Handler:
        self._array = JsonCallArray(
            self.out,
            name_keys=self.name_keys,
            args_keys=self.args_keys,
            id_keys=self.id_keys,
            await_id=self.await_id,
            new_id=self._new_id,
            opened=self.marker_opens_array,
        )
        return self._calls

    def _calls(self, text: str, pos: int) -> int:
        array = self._array
        pos = array.feed(text, pos)
        if array.done or (array.failed and not self.region_end):
            self.resume()
        elif array.failed:
            self.handler = self._skip_region
        return pos

    def _skip_region(self, text: str, pos: int) -> int:
        """A broken array: drop the rest of the call region."""
        _, marker, pos = self._region_scan.scan(text, pos)
        if marker:
            self.resume()
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._calls:
            self._array.close()


@register
class MistralJsonArrayParser(CallArrayParser):
    """Content, then `[TOOL_CALLS]` and a JSON array of calls with their ids; no reasoning."""

    name = "mistral_json_array"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("</s>",)
    call_markers = ("[TOOL_CALLS]",)
    await_id = True

    def _new_id(self) -> str:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
