"""No input makes a parser loop: the stall guard of `StreamParser`, and every registered
format fuzzed under a per-example time budget, bare JSON envelopes included."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.canonical.events import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from responsekit.parsing import available_formats
from responsekit.parsing.base import StreamParser

from .parsing_support import check_soup, fold
from .test_formats_group_a import FRAGMENTS_A
from .test_formats_group_b import FRAGMENTS_B
from .test_formats_group_c import FRAGMENTS_C
from .test_fuzz import COMMON, FRAGMENTS, TOOLS

BARE = [
    '{"name": "f", "foo": 1}',
    '{"name": "f"}',
    '{"name": 3}',
    '[{"name": "f"}]',
    '[{"name": "f", "foo": 1}]',
    '{"name": "f", "arguments": {"n": 1}, "foo": [1]}',
    '{"foo": 1, "name": "f"}',
    '{"name": "g"}',
    '{"name": "f", ',
    '"foo": 1}',
    '"arguments": {}}',
]
"""Bare JSON shapes: envelopes naming the declared tool `f` without arguments, with
other members, in a list, or naming something else."""

POOLS = {**FRAGMENTS, **FRAGMENTS_A, **FRAGMENTS_B, **FRAGMENTS_C}


@pytest.mark.parametrize("fmt", available_formats())
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_every_format_ends_on_bare_json_soups(fmt: str, data: st.DataObject) -> None:
    check_soup(fmt, COMMON + POOLS[fmt] + BARE, TOOLS, data, leads=BARE)


class _Stuck(StreamParser):
    """A deliberately broken parser: after `!` its handler returns without consuming."""

    name = "stuck"

    def __init__(self, *, cycle: bool = False) -> None:
        super().__init__()
        self.handler = self._text
        self._cycle = cycle

    def _text(self, text: str, pos: int) -> int:
        end = text.find("!", pos)
        if end == -1:
            self.out.text(text[pos:])
            return len(text)
        self.out.text(text[pos:end])
        self.out.start_call("f")
        self.out.args('{"a": "')
        self.handler = self._ping
        return end + 1

    def _ping(self, text: str, pos: int) -> int:
        if self._cycle:
            self.handler = self._pong
        return pos

    def _pong(self, text: str, pos: int) -> int:
        self.handler = self._ping
        return pos

    def _finish(self) -> None:
        if self.out.open_call is not None:
            self.out.args('"}')


@pytest.mark.parametrize("cycle", [False, True])
def test_a_stuck_handler_ends_the_call_and_the_rest_is_content(
    cycle: bool, caplog: pytest.LogCaptureFixture
) -> None:
    parser = _Stuck(cycle=cycle)
    with caplog.at_level(logging.WARNING, logger="responsekit.parsing.base"):
        events = parser.feed("ab!cd") + parser.feed("ef") + parser.finish()
    assert events[:2] == [TextDelta("ab"), ToolCallStart(0, events[1].id, "f")]
    assert events[2:] == [
        ToolCallDelta(0, '{"a": ""}'),
        ToolCallEnd(0),
        TextDelta("cd"),
        TextDelta("ef"),
    ]
    folded = fold(events)
    assert json.loads(folded.calls[0].arguments) == {"a": ""}
    assert folded.content == "abcdef"
    assert ["stuck parser stuck" in r.getMessage() for r in caplog.records] == [True]
