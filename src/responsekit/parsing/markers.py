"""Find markers in streamed text, holding back a tail that may still become one.

A marker such as `<tool_call>` often arrives split over several deltas (`<tool_ca` +
`ll>`).  `MarkerScanner` is an Aho–Corasick automaton stepped one character at a time;
its state *is* the held-back tail (the longest suffix of the text that is a prefix of
some marker), so nothing is ever re-scanned and each character costs one table lookup.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import NamedTuple


class _Automaton(NamedTuple):
    trans: list[dict[str, int]]
    """Transition table of the DFA."""
    match: list[str | None]
    """The marker completed on entering each state."""
    prefix: list[str]
    """The text each state stands for (a marker prefix)."""
    starts: frozenset[str]
    """The first characters of the markers."""
    find_marker: Callable[[str], re.Match[str] | None]
    """Finds a whole marker anywhere in a text."""
    find_tail: Callable[[str], re.Match[str] | None]
    """Finds the longest suffix of a text that is a marker prefix."""


@lru_cache(maxsize=256)
def _compile(markers: tuple[str, ...]) -> _Automaton:
    goto: list[dict[str, int]] = [{}]
    prefix = [""]
    ends: list[str | None] = [None]
    for marker in markers:
        state = 0
        for ch in marker:
            nxt = goto[state].get(ch)
            if nxt is None:
                nxt = len(goto)
                goto[state][ch] = nxt
                goto.append({})
                prefix.append(prefix[state] + ch)
                ends.append(None)
            state = nxt
        ends[state] = marker
    # Breadth-first: failure links, then a full transition table (a DFA), so that
    # stepping never follows links at run time.
    fail = [0] * len(goto)
    match: list[str | None] = list(ends)
    trans: list[dict[str, int]] = [dict(goto[0])] + [{} for _ in goto[1:]]
    queue = deque(goto[0].values())
    while queue:
        state = queue.popleft()
        if match[state] is None:
            match[state] = match[fail[state]]
        table = dict(trans[fail[state]])
        for ch, nxt in goto[state].items():
            fail[nxt] = trans[fail[state]].get(ch, 0)
            table[ch] = nxt
            queue.append(nxt)
        trans[state] = table
    return _Automaton(
        trans,
        match,
        prefix,
        frozenset(goto[0]),
        re.compile(_trie_pattern(goto, ends, 0, prefixes=False) or "(?!)").search,
        re.compile((_trie_pattern(goto, ends, 0, prefixes=True) or "(?!)") + r"\Z").search,
    )


def _trie_pattern(
    goto: list[dict[str, int]], ends: list[str | None], state: int, *, prefixes: bool
) -> str:
    """A regex for the trie below `state`: the markers, or (`prefixes`) their prefixes.

    Shaped as the trie itself, so a search costs one walk per start position however
    many markers there are.
    """
    branches = [
        re.escape(ch) + _trie_pattern(goto, ends, nxt, prefixes=prefixes)
        for ch, nxt in goto[state].items()
    ]
    if not branches:
        return ""
    body = "(?:" + "|".join(branches) + ")"
    return body + "?" if state and (prefixes or ends[state] is not None) else body


class MarkerScanner:
    """Splits a stream into plain text and markers, across any chunking.

    Matching rule: a marker is reported at the first position where one completes; if
    several complete there, the longest wins (so `\\n</parameter>` beats `</parameter>`).
    The automaton for a marker set is built once and shared; a scanner only holds its
    state.  `starts` are the markers' first characters: from rest, text without any of
    them is all plain and leaves the scanner at rest (what a parser's fast lane relies on).
    """

    __slots__ = (
        "_find",
        "_match",
        "_prefix",
        "_shortest",
        "_state",
        "_tail",
        "_trans",
        "markers",
        "starts",
    )

    def __init__(self, markers: Iterable[str | None]) -> None:
        self.markers: tuple[str, ...] = tuple(dict.fromkeys(m for m in markers if m))
        automaton = _compile(self.markers)
        self._trans, self._match, self._prefix = automaton[:3]
        self.starts = automaton.starts
        self._find = automaton.find_marker
        self._tail = automaton.find_tail
        self._shortest = min(map(len, self.markers), default=0)
        self._state = 0

    @property
    def held(self) -> str:
        """The text currently held back because it may be the start of a marker."""
        return self._prefix[self._state]

    @property
    def resting(self) -> bool:
        """Nothing is held back."""
        return self._state == 0

    def scan(self, text: str, pos: int = 0) -> tuple[str, str | None, int]:
        """Consume `text[pos:]` up to and including the first marker.

        Returns `(plain, marker, end)`: the text now known not to belong to a marker
        (including any previously held tail that turned out to be plain), the marker
        found or None, and the position after what was consumed.  Without a marker the
        whole rest is consumed and a possible marker prefix stays held.
        """
        state = self._state
        held = self._prefix[state]
        trans = self._trans
        match = self._match
        i = pos
        for ch in text[pos:] if pos else text:
            state = trans[state].get(ch, 0)
            i += 1
            marker = match[state]
            if marker is not None:
                self._state = 0
                chunk = held + text[pos:i]
                return chunk[: len(chunk) - len(marker)], marker, i
        self._state = state
        chunk = held + text[pos:]
        return chunk[: len(chunk) - len(self._prefix[state])], None, i

    def split(self, text: str) -> tuple[str, str] | None:
        """What `scan(text)` would do from rest, without stepping: `(plain, held)` when
        no marker completes in `text`, None when one does.  The scanner is not changed.

        For a fast lane (see `StreamParser.fast_lane`), which holds `held` back itself
        and feeds it again with the next delta.
        """
        if len(text) >= self._shortest and self._find(text) is not None:
            return None
        tail = self._tail(text)
        if tail is None:
            return text, ""
        cut = tail.start()
        return text[:cut], text[cut:]

    def flush(self) -> str:
        """End of stream: return the held tail as plain text and reset."""
        held = self._prefix[self._state]
        self._state = 0
        return held

    def reset(self) -> None:
        """Forget the held tail (used when the text after a marker is parsed otherwise)."""
        self._state = 0
