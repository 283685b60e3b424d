"""The parser interface, and the state-machine driver most formats build on."""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar

from responsekit.events import Event
from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.schema import ToolSchemas

Split = Callable[[str], tuple[str, str] | None]
"""A fast lane's second test (see `StreamParser.fast_lane`)."""


_Lane = tuple[Callable[[str], object], Callable[[str], Event], list[str] | None, Split | None]
"""A state's fast lane, as `StreamParser.fast_lane` declares it: a search for a stop
character, the event type reporting a delta, for prose the whitespace the event buffer
holds, and the split.  A plain tuple: unpacking a NamedTuple costs more, once per token."""


Handler = Callable[[str, int], int]
"""Consumes `text[pos:]` as far as its state allows and returns the new position.

A handler may return `pos` unchanged only after switching `self.handler`."""

log = logging.getLogger(__name__)

_IDLE_LIMIT = 16
"""Handler switches in a row without consuming input before the parser is judged stuck
(a real chain of state changes at one position is a few switches long)."""


@lru_cache(maxsize=256)
def _stop_finder(stops: frozenset[str]) -> Callable[[str], object]:
    """A search for any of `stops` (a regex: unlike `frozenset.isdisjoint`, it creates
    no string per character of non-Latin-1 text)."""
    return re.compile(
        "[" + "".join(sorted(map(re.escape, stops))) + "]" if stops else "(?!)"
    ).search


class Parser(ABC):
    """Turns one generation's raw text into canonical events, incrementally.

    `tools` are the request's function tools (chat or Responses shape), used to type
    values of XML-style formats; `thinking_open` says the rendered prompt already
    opened the reasoning block (decide it with `thinking_open_in`).
    """

    name: ClassVar[str]

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        self.schemas = ToolSchemas(tools)
        self.thinking_open = thinking_open

    @abstractmethod
    def feed(self, text: str) -> list[Event]:
        """Take a text delta; return the events it decides (a marker prefix is held)."""

    @abstractmethod
    def finish(self) -> list[Event]:
        """End of generation: flush held text and close open calls."""

    @classmethod
    def thinking_open_in(cls, prompt: str) -> bool:
        """Whether `prompt` (rendered, generation prompt included) ends inside reasoning."""
        return False


class StreamParser(Parser):
    """A parser run by handlers: the current one consumes text until its state changes.

    Subclasses set `self.handler` in `__init__` and implement `_finish`; events go
    through `self.out`, which coalesces them per `feed()`.

    Fed token by token, almost every delta changes nothing but the output (prose, a
    string value), and running the handlers for each costs far more than scanning it.
    So a handler that consumed all of its text, stays the handler and holds nothing
    back may declare the state's *fast lane* (`fast_lane()`): `feed()` then reports
    a delta itself when the lane accepts it, without running any handler.  The lane
    is cleared before every handler call, so it only ever describes the state the last
    handler left.
    """

    handler: Handler

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self.out = EventBuffer()
        self._lane: _Lane | None = None
        self._lane_tail = ""  # input a lane left unread: the next delta continues it

    def feed(self, text: str) -> list[Event]:
        if self._lane_tail:
            text = self._lane_tail + text
            self._lane_tail = ""
        lane = self._lane
        if lane is not None and text:
            find, make, held, split = lane
            if not find(text):
                if held is None:
                    return [make(text)]
                if held:
                    return self._lane_prose(text, held, make)
                if text[-1].isspace():  # the whitespace waits, unread, for the next delta
                    core = text.rstrip()
                    if not core:
                        return self._lane_prose(text, held, make)
                    self._lane_tail = text[len(core) :]
                    return [make(core)]
                return [make(text)]
            if split is not None:
                parts = split(text)
                if parts is not None:
                    report, tail = parts
                    if tail:
                        self._lane_tail = tail
                    if not report:
                        return []
                    if held is None:
                        return [make(report)]
                    return self._lane_prose(report, held, make)
        self._run_handlers(text)
        return self.out.take()

    def fast_lane(self, kind: int, stops: frozenset[str], split: Split | None = None) -> None:
        """Declare the current state's fast lane.

        A delta containing none of `stops` is reported as `kind` (`emit.TEXT`,
        `REASONING` or `ARGS`) and changes nothing else.  `split`, asked about other
        deltas, returns `(report, held)`: the text to report (already in its output
        form, e.g. escaped), for a part of the delta that equally changes nothing else,
        and the rest, which must not be read yet (a possible marker or escape start,
        bounded): it is fed again in front of the next delta.  It returns None when the
        handlers must run.
        """
        output = self.out.lane(kind)
        if output is not None:
            self._lane = (_stop_finder(stops), *output, split)

    @staticmethod
    def _lane_prose(text: str, held: list[str], make: Callable[[str], Event]) -> list[Event]:
        """Prose in the fast lane with whitespace held (by `EventBuffer` or now): trailing
        whitespace waits for more text of the same kind."""
        core = text.rstrip()
        if not core:
            held.append(text)
            return []
        tail = text[len(core) :]
        if held:
            core = "".join(held) + core
            held.clear()
        if tail:
            held.append(tail)
        return [make(core)]

    def _run_handlers(self, text: str) -> None:
        pos, n = 0, len(text)
        idle = 0  # handler calls since input was last consumed
        while pos < n:
            self._lane = None
            handler = self.handler
            end = handler(text, pos)
            if end > pos:
                pos, idle = end, 0
                continue
            idle += 1
            if self.handler is handler or idle > _IDLE_LIMIT:
                self._stalled(text, pos)

    def _stalled(self, text: str, pos: int) -> None:
        """A handler neither consumed input nor changed state: called again, it would do
        the same forever.  A parser bug, so fail safe instead of spinning: close what
        the state holds (an open call gets valid arguments) and make the rest of the
        output content."""
        log.warning(
            "%s parser stuck in %s at %r: the rest of the output is content",
            self.name,
            getattr(self.handler, "__name__", self.handler),
            text[pos : pos + 40],
        )
        self._finish()
        self.out.end_call()
        self.handler = self._verbatim

    def _verbatim(self, text: str, pos: int) -> int:
        """After a stall: everything is content."""
        self.out.text(text[pos:])
        return len(text)

    def _replay(self, text: str) -> None:
        """Run the current handlers over `text`, a bounded tail a scanner held back.

        For a state change decided *after* a marker prefix was held: the prefix belongs
        to the new state, which may complete the marker with the next delta.
        """
        self._run_handlers(text)
        self._lane = None  # the caller's handler goes on from here

    def finish(self) -> list[Event]:
        if self._lane_tail:
            self._run_handlers(self._lane_tail)
            self._lane_tail = ""
        if self.handler != self._verbatim:
            self._finish()
        self.out.end_call()
        return self.out.take()

    @abstractmethod
    def _finish(self) -> None:
        """Flush whatever the current state holds back."""
