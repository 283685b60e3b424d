"""Fast lanes: what a parser reports without running its handlers must be exactly what
the handlers would have done, and the lanes must really be taken for plain deltas."""

from __future__ import annotations

import json
import random
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.canonical.events import Event, ReasoningDelta, TextDelta, ToolCallDelta
from responsekit.parsing import get_parser
from responsekit.parsing.base import StreamParser
from responsekit.parsing.formats.qwen3_coder_xml import _VALUE_ENDS, Qwen3CoderXmlParser
from responsekit.parsing.json_stream import JsonValueStreamer, string_split
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.xml_args import escape

from .parsing_support import fold, run

MARKERS = ("<tool_call>", "</tool_call>", "<think>", "\n</parameter>", "</parameter>", "\n<p=")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="<>/\nptoalhink_=x ", max_size=24))
def test_split_is_scan_from_rest(text: str) -> None:
    scanner = MarkerScanner(MARKERS)
    plain, marker, end = scanner.scan(text)
    split = MarkerScanner(MARKERS).split(text)
    if marker is not None:
        assert split is None
    else:
        assert split == (plain, scanner.held)
        assert end == len(text)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='ab"\\\nu0/d8e', max_size=12))
def test_string_split_is_the_streamer_in_a_string(text: str) -> None:
    streamer = JsonValueStreamer()
    streamer.feed('{"k": "')
    split = string_split(text)
    if split is None:
        return
    report, held = split
    assert report + held == text
    assert held == "" or (held[0] == "\\" and len(held) <= 5), "only a cut escape waits"
    emitted, end = streamer.feed(report)
    assert (emitted, end) == (report, len(report))
    assert streamer.in_string


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='<>/\npaxrmet=fu"\\ ', min_size=1, max_size=16))
def test_qwen_value_split_is_the_marker_split(text: str) -> None:
    """The value lane's shortcut (no `</`, `<p` or final `<`: no marker search) gives
    what the general marker split does."""
    parser = get_parser("qwen3_coder_xml")([])
    assert isinstance(parser, Qwen3CoderXmlParser)
    parts = MarkerScanner(_VALUE_ENDS).split(text)
    expected = None if parts is None else (escape(parts[0]), parts[1])
    assert parser._split_value(text) == expected


def test_lane_events_equal_constructed_ones() -> None:
    """Lanes build events without calling their class (`base._new`): the fields they set
    must be all the class has, and the events must equal constructed ones."""
    assert [f.name for f in fields(TextDelta)] == ["text"]
    assert [f.name for f in fields(ReasoningDelta)] == ["text"]
    assert [f.name for f in fields(ToolCallDelta)] == ["index", "arguments"]
    assert not any(
        hasattr(cls, "__post_init__") for cls in (TextDelta, ReasoningDelta, ToolCallDelta)
    )
    parser = get_parser("hermes_json")([], thinking_open=True)
    lanes: list[Event] = []

    def lane(delta: str) -> None:
        handler, parser.handler = parser.handler, _boom
        lanes.extend(parser.feed(delta))
        parser.handler = handler

    parser.feed("so")
    lane(" we")
    lane(" go ")
    parser.feed("</think>Hi")
    lane(" you")
    parser.feed('<tool_call>{"name": "f", "arguments": {"a": "')
    lane("xy")
    lane("z\\")
    assert lanes == [
        ReasoningDelta(" we"),
        ReasoningDelta(" go"),
        TextDelta(" you"),
        ToolCallDelta(0, "xy"),
        ToolCallDelta(0, "z"),
    ]


def _boom(text: str, pos: int) -> int:
    raise AssertionError(f"the handlers ran for {text!r}")


# (format, thinking_open, text that opens a state with a lane, plain deltas, a delta
# that must reach the handlers)
LANES = [
    ("hermes_json", False, "<think>\nhmm", ["abcd", " ef ", 'g"h\\', "\n\n"], "</think>"),
    ("hermes_json", False, "Hi there", ["abcd", "a < b", "<b>x"], "<tool_call>"),
    (
        "hermes_json",
        False,
        '<tool_call>{"name": "f", "arguments": {"s": "x',
        ["abcd", "a\\nb", "c\\", "\\d", "<tool_call>"],
        '"',
    ),
    (
        "qwen3_coder_xml",
        False,
        "<tool_call>\n<function=f>\n<parameter=s>\nxy",
        ["abcd", 'a"b\\', "x\n", "if a < b", "</div>"],
        "\n</parameter>",
    ),
    ("qwen3_coder_xml", True, "so", [" we ", "will"], "</think>"),
    ("deepseek_r1", True, "think", [" abc", "d"], "</think>"),
    ("mistral_args", False, "[THINK]hm", ["abcd", "x < y"], "[/THINK]"),
    (
        "mistral_args",
        False,
        '[TOOL_CALLS]f[ARGS]{"s": "',
        ["abcd", "\\t"],
        '"}',
    ),
    ("gpt_oss_harmony", False, "<|channel|>analysis<|message|>hm", ["abcd", "<b>"], "<|end|>"),
    (
        "gpt_oss_harmony",
        False,
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"s": "',
        ["abcd", "é日本"],
        '"}',
    ),
]


@pytest.mark.parametrize(("fmt", "thinking_open", "opening", "plain", "decisive"), LANES)
def test_plain_deltas_take_the_lane(
    fmt: str, thinking_open: bool, opening: str, plain: list[str], decisive: str
) -> None:
    """Once a state is entered, plain deltas never reach the handlers; the deltas fold
    to what the handlers produce for the same text at once."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    parser = get_parser(fmt)(tools, thinking_open=thinking_open)
    assert isinstance(parser, StreamParser)
    events = parser.feed(opening)
    handler = parser.handler
    parser.handler = _boom
    for delta in plain:
        events += parser.feed(delta)
    parser.handler = handler
    events += parser.feed(decisive) + parser.finish()

    reference = get_parser(fmt)(tools, thinking_open=thinking_open)
    whole = run(reference, [opening + "".join(plain) + decisive])
    assert fold(events).comparable(False) == whole.comparable(False)
    with pytest.raises(AssertionError, match="the handlers ran"):
        stuck = get_parser(fmt)(tools, thinking_open=thinking_open)
        stuck.feed(opening + "".join(plain))
        stuck.handler = _boom
        stuck.feed(decisive)


def _mixed_output(rng: random.Random) -> tuple[str, str, bool]:
    """Long prose and code-bearing calls, in one of the formats, with everything a lane
    must stop at: markers and their prefixes, quotes, escapes, line breaks, `<`."""
    words = ["the", "a", "<b>", "x < y", "é", "日本", '"q"', "\\", "\n", "\n\n", "  ", "</", "<t"]
    prose = " ".join(rng.choice(words) for _ in range(rng.randint(5, 60))).strip() or "ok"
    lines = ['print("hi")', "if a < b:", "  return '\\\\t'", "<div>x</div>", "# </tool_call>"]
    code = "\n".join(rng.choice(lines) for _ in range(rng.randint(1, 12)))
    args = json.dumps({"path": "a.py", "content": code}, ensure_ascii=rng.random() < 0.5)
    fmt = rng.choice(sorted(FORMATS))
    return fmt, FORMATS[fmt][0].format(prose=prose, code=code, args=args), FORMATS[fmt][1]


FORMATS = {
    "hermes_json": (
        (
            '<think>{prose}</think>{prose}<tool_call>\n{{"name": "f", "arguments": {args}}}'
            "\n</tool_call>"
        ),
        False,
    ),
    "qwen3_coder_xml": (
        (
            "{prose}</think>\n{prose}\n<tool_call>\n<function=f>\n<parameter=content>\n{code}"
            "\n</parameter>\n</function>\n</tool_call>"
        ),
        True,
    ),
    "deepseek_r1": (
        (
            "{prose}</think>{prose}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f"
            "\n```json\n{args}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
        True,
    ),
    "mistral_args": ("[THINK]{prose}[/THINK]{prose}[TOOL_CALLS]f[ARGS]{args}</s>", False),
    "gpt_oss_harmony": (
        (
            "<|channel|>analysis<|message|>{prose}<|end|><|start|>assistant<|channel|>final"
            "<|message|>{prose}<|end|><|start|>assistant<|channel|>commentary to=functions.f"
            " <|constrain|>json<|message|>{args}<|call|>"
        ),
        False,
    ),
}
"""Templates of a whole output per format, and whether thinking starts open."""


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("finish", [True, False])
def test_token_sized_deltas_equal_one_shot(seed: int, finish: bool) -> None:
    """Deltas of 1 to 6 characters, as tokens come, against the one-shot parse,
    finished or cut anywhere (partial snapshots must match too)."""
    rng = random.Random(seed)
    fmt, raw, thinking_open = _mixed_output(rng)
    if not finish:
        raw = raw[: rng.randint(0, len(raw))]
    pieces, pos = [], 0
    while pos < len(raw):
        step = rng.randint(1, 6)
        pieces.append(raw[pos : pos + step])
        pos += step
    cls = get_parser(fmt)
    whole = run(cls([], thinking_open=thinking_open), [raw], finish=finish)
    streamed = run(cls([], thinking_open=thinking_open), pieces, finish=finish)
    assert streamed.comparable(False) == whole.comparable(False)
