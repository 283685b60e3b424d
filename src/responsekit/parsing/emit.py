"""Collect a parser's decisions into canonical events, one call's worth at a time.

Parsers report what they decided (prose, reasoning, call starts, argument text); the
buffer coalesces adjacent pieces into one event per kind, so a one-shot parse and a
token-by-token parse differ only in how the same text is cut into deltas.

Prose is trimmed as it streams: leading whitespace of reasoning or content is dropped
and trailing whitespace is held until more text of the same kind follows, so the blank
lines around `</think>` or between tool calls never become a content item.  The result
does not depend on how the input was chunked.
"""

from __future__ import annotations

from responsekit.canonical.events import (
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from responsekit.canonical.ids import new_id

# Kinds of reported text (`lane()`, `StreamParser.fast_lane`).
REASONING = 0
TEXT = 1
ARGS = 2


class EventBuffer:
    """Builds the event list a `feed()`/`finish()` call returns."""

    __slots__ = (
        "_count",
        "_events",
        "_kind",
        "_open",
        "_parts",
        "_pending",
        "_started",
    )

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._kind = -1
        self._parts: list[str] = []
        self._started = [False, False]
        self._pending: tuple[list[str], list[str]] = ([], [])  # held trailing whitespace
        self._open: int | None = None
        self._count = 0

    @property
    def open_call(self) -> int | None:
        """Index of the call whose arguments are streaming, if any."""
        return self._open

    @property
    def calls(self) -> int:
        """How many calls have been started."""
        return self._count

    def reasoning(self, text: str) -> None:
        """Report reasoning text."""
        if text:
            self._prose(REASONING, text)

    def text(self, text: str) -> None:
        """Report visible content."""
        if text:
            self._prose(TEXT, text)

    def start_call(self, name: str, call_id: str | None = None) -> int | None:
        """Open a tool call; ends a call still open.  Returns its index.

        A call without a name is no call: nothing is emitted, its arguments are
        ignored, and None is returned.
        """
        if self._open is not None:
            self.end_call()
        if not name:
            return None
        self._flush()
        index = self._count
        self._count += 1
        self._open = index
        self._events.append(ToolCallStart(index, call_id or new_id("call"), name))
        return index

    def args(self, text: str) -> None:
        """Append argument text to the open call."""
        if not text or self._open is None:
            return
        if self._kind != ARGS:
            self._flush()
            self._kind = ARGS
        self._parts.append(text)

    def end_call(self) -> None:
        """Close the open call, if any."""
        if self._open is None:
            return
        self._flush()
        self._events.append(ToolCallEnd(self._open))
        self._open = None

    def lane(self, kind: int) -> tuple[type[Event], list[str] | None, int] | None:
        """What a fast lane of `kind` needs to report a delta without this buffer.

        The event type for one delta; for prose the held trailing whitespace (a delta
        is reported as the held text plus itself, and its own trailing whitespace is
        held instead), for arguments the open call's index (`ToolCallDelta(index, text)`:
        called directly, a `partial` would cost ~25 ns per token).  None while the lane
        cannot bypass the buffer: arguments with no call open, prose whose leading
        whitespace is still being dropped.
        """
        if kind == ARGS:
            return None if self._open is None else (ToolCallDelta, None, self._open)
        if not self._started[kind]:
            return None
        return (TextDelta if kind == TEXT else ReasoningDelta), self._pending[kind], -1

    def take(self) -> list[Event]:
        """Return the events decided since the last call and start afresh."""
        if self._parts:
            self._flush()
        events = self._events
        if not events:
            return []
        self._events = []
        return events

    def _prose(self, kind: int, text: str) -> None:
        if not self._started[kind]:
            text = text.lstrip()
            if not text:
                return
            self._started[kind] = True
        core = text.rstrip()
        pending = self._pending[kind]
        if not core:
            pending.append(text)
            return
        if self._kind != kind:
            self._flush()
            self._kind = kind
        if pending:
            self._parts.extend(pending)
            pending.clear()
        self._parts.append(core)
        if len(core) < len(text):
            pending.append(text[len(core) :])

    def _flush(self) -> None:
        parts = self._parts
        if not parts:
            return
        joined = parts[0] if len(parts) == 1 else "".join(parts)
        parts.clear()
        kind = self._kind
        if kind == TEXT:
            self._events.append(TextDelta(joined))
        elif kind == REASONING:
            self._events.append(ReasoningDelta(joined))
        elif self._open is not None:
            self._events.append(ToolCallDelta(self._open, joined))
