"""The parser interface, and the state-machine driver most formats build on."""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar

from responsekit.canonical.events import Event
from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.schema import ToolSchemas

Split = Callable[[str], tuple[str, str] | None]
"""A fast lane's second test (see `StreamParser.fast_lane`)."""


_Lane = tuple[str | None, Callable[[str], object], type[Event], list[str] | None, Split | None, int]
"""A state's fast lane, as `StreamParser.fast_lane` declares it: the stop character when
there is one (`in` is cheaper than a search), a search for the stop characters, the
event type reporting a delta, for prose the whitespace the event buffer holds, the
split, and for arguments the call's index.  A plain tuple: unpacking a NamedTuple costs
more, once per token."""


Handler = Callable[[str, int], int]
"""Consumes `text[pos:]` as far as its state allows and returns the new position.

A handler may return `pos` unchanged only after switching `self.handler`."""

log = logging.getLogger(__name__)

_new: Callable[[type[Event]], Any] = object.__new__
"""A lane builds its event as `_new(cls)` and sets the fields, as the dataclass's
`__init__` would: calling the class costs ~35 ns more per token, a sixth of a plain
delta's handling (`test_lanes` checks the events equal constructed ones)."""

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
    through `self.out`, which coalesces them per `feed()`.  A handler that neither
    consumes input nor changes state would be called forever: `feed()` catches it
    (`_stalled`) rather than spin.

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
        self._parked: _Lane | None = None  # the lane while a tail waits

    def feed(self, text: str) -> list[Event]:
        lane = self._lane
        if lane is None:
            tail = self._lane_tail
            if not tail:
                self._run_handlers(text)
                return self.out.take()
            text = tail + text
            self._lane_tail = ""
            lane = self._lane = self._parked
        if not text:
            return []
        stop, find, make, held, split, index = lane
        if not (find(text) if stop is None else stop in text):
            if held is None:
                event = _new(make)
                event.index = index
                event.arguments = text
                return [event]
            if held:
                return self._lane_prose(text, "", held, make)
            core = text.rstrip()  # the string itself when there is nothing to strip
            if core is not text:
                if not core:
                    return self._lane_prose(text, "", held, make)
                self._lane_tail = text[len(core) :]  # the whitespace waits, unread
                self._parked, self._lane = lane, None
            event = _new(make)
            event.text = core
            return [event]
        if split is not None:
            parts = split(text)
            if parts is not None:
                report, tail = parts
                if held is not None:
                    return self._lane_prose(report, tail, held, make)
                if tail:
                    self._lane_tail = tail
                    self._parked, self._lane = lane, None
                if not report:
                    return []
                event = _new(make)
                event.index = index
                event.arguments = report
                return [event]
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
            make, held, index = output
            stop = next(iter(stops)) if len(stops) == 1 else None
            self._lane = (stop, _stop_finder(stops), make, held, split, index)

    def _lane_prose(
        self, report: str, tail: str, held: list[str], make: type[Event]
    ) -> list[Event]:
        """Prose in the lane: trailing whitespace waits for more text of the same kind,
        unread in front of `tail` (bounded by the delta), or, when the report is all
        whitespace, held by `EventBuffer` (which joins it to what follows)."""
        core = report.rstrip()
        if not core:
            held.append(report)
            if tail:
                self._wait(tail)
            return []
        if len(core) < len(report):
            tail = report[len(core) :] + tail
        if tail:
            self._wait(tail)
        if held:
            core = "".join(held) + core
            held.clear()
        event = _new(make)
        event.text = core
        return [event]

    def _wait(self, tail: str) -> None:
        """Keep `tail` unread: the next delta is read after it.  The lane is parked
        meanwhile, so that a plain delta's path has nothing to check for it."""
        self._lane_tail = tail
        self._parked, self._lane = self._lane, None

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
