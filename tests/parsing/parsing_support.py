"""Shared helpers for the parser tests: run a parser over chunks and fold its events."""

from __future__ import annotations

import itertools
import json
import logging
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from hypothesis import strategies as st

from responsekit.canonical.events import (
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from responsekit.parsing import Parser, get_parser

CASES_PATH = Path(__file__).resolve().parents[1] / "data" / "formats" / "cases.jsonl"
TEMPLATES_DIR = CASES_PATH.parent / "templates"


def load_cases() -> list[dict[str, Any]]:
    with CASES_PATH.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class Call:
    id: str
    name: str
    arguments: str = ""
    ended: bool = False


@dataclass
class Folded:
    """What a client would have assembled from the events."""

    reasoning: str = ""
    content: str = ""
    calls: list[Call] = field(default_factory=list)

    def comparable(self, keep_ids: bool) -> tuple[Any, ...]:
        calls = tuple(
            (c.id if keep_ids else None, c.name, c.arguments, c.ended) for c in self.calls
        )
        return (self.reasoning, self.content, calls)


def fold(events: list[Event]) -> Folded:
    """Fold events, asserting the stream is well formed."""
    out = Folded()
    open_index: int | None = None
    for event in events:
        if isinstance(event, ReasoningDelta):
            assert open_index is None, "reasoning while a call is open"
            assert event.text, "empty reasoning delta"
            out.reasoning += event.text
        elif isinstance(event, TextDelta):
            assert open_index is None, "content while a call is open"
            assert event.text, "empty text delta"
            out.content += event.text
        elif isinstance(event, ToolCallStart):
            assert open_index is None, "call started while another is open"
            assert event.index == len(out.calls), "call indices must count up from 0"
            assert event.name, "call without a name"
            assert event.id, "call without an id"
            out.calls.append(Call(event.id, event.name))
            open_index = event.index
        elif isinstance(event, ToolCallDelta):
            assert event.index == open_index, "arguments for a call that is not open"
            assert event.arguments, "empty argument delta"
            out.calls[event.index].arguments += event.arguments
        elif isinstance(event, ToolCallEnd):
            assert event.index == open_index, "end of a call that is not open"
            out.calls[event.index].ended = True
            open_index = None
        else:
            raise AssertionError(f"parsers must not produce {event!r}")
    return out


def run(parser: Parser, chunks: list[str], *, finish: bool = True) -> Folded:
    events: list[Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    if finish:
        events.extend(parser.finish())
    return fold(events)


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c for c in cuts if 0 < c < len(text)})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def heal(prefix: str) -> Any:
    """Parse a streamed argument prefix by closing its open string and containers.

    Written independently of the parsers' own JSON machinery, on purpose: it only
    closes, it never drops text, so it fails on a prefix that is not healable.
    """
    stack: list[str] = []
    in_string = escaped = False
    for ch in prefix:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            stack.pop()
    if not prefix:
        return {}
    return json.loads(prefix + ('"' if in_string else "") + "".join(reversed(stack)))


EXAMPLE_BUDGET = 5.0
"""Seconds one fuzz example may take: parsing a soup takes milliseconds, so running out
means a loop that would never end."""


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: raises TimeoutError in the code running when time is up
    (a pure-Python loop included)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"parsing took over {seconds}s: a loop that never ends?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def no_stalls() -> Iterator[None]:
    """Assert the stall guard of `StreamParser` never fired: it keeps a stuck parser from
    hanging, but firing means a handler bug, which a fuzz example must report."""
    collect = _Collect()
    logger = logging.getLogger("responsekit.parsing.base")
    logger.addHandler(collect)
    try:
        yield
    finally:
        logger.removeHandler(collect)
    assert not collect.records, collect.records[0].getMessage()


def check_soup(
    fmt: str | type[Parser],
    pool: Sequence[str],
    tools: Sequence[Any],
    data: st.DataObject,
    *,
    leads: Sequence[str] = ("",),
) -> None:
    """Parse a random soup of `pool` fragments one-shot, per character and in random
    chunks, within `EXAMPLE_BUDGET`: all three agree, no stall, every call ends with
    valid JSON arguments, and a cut stream's arguments heal.  The soup starts with one
    of `leads` (where marker-less forms are read: bare JSON)."""
    pieces = data.draw(st.lists(st.sampled_from(pool), max_size=30))
    raw = data.draw(st.sampled_from(leads)) + "".join(pieces)
    thinking_open = data.draw(st.booleans())
    tools = data.draw(st.sampled_from([tools, ()]))
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    cls = get_parser(fmt) if isinstance(fmt, str) else fmt
    with time_budget(EXAMPLE_BUDGET), no_stalls():
        whole = run(cls(tools, thinking_open=thinking_open), [raw])
        split = run(cls(tools, thinking_open=thinking_open), split_at(raw, cuts))
        chars = run(cls(tools, thinking_open=thinking_open), list(raw))
        snapshot = run(cls(tools, thinking_open=thinking_open), split_at(raw, cuts), finish=False)
    assert split.comparable(False) == whole.comparable(False)
    assert chars.comparable(False) == whole.comparable(False)
    for call in whole.calls:
        assert call.ended
        json.loads(call.arguments)
    for call in snapshot.calls:
        heal(call.arguments)
