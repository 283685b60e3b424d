"""MarkerScanner: hold-back across any split, leftmost completion, longest at a tie."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.parsing.markers import MarkerScanner

from .parsing_support import split_at

MARKERS = ("<tool_call>", "</tool_call>", "<think>", "</think>", "\n</parameter>", "</parameter>")


def scan_all(scanner: MarkerScanner, chunks: list[str]) -> list[tuple[str, str]]:
    """Feed chunks; return [("text", …) | ("marker", …)] with adjacent text merged."""
    out: list[tuple[str, str]] = []

    def add(kind: str, value: str) -> None:
        if kind == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + value)
        elif value:
            out.append((kind, value))

    for chunk in chunks:
        pos = 0
        while pos < len(chunk):
            plain, marker, pos = scanner.scan(chunk, pos)
            add("text", plain)
            if marker:
                add("marker", marker)
    add("text", scanner.flush())
    return out


def reference(text: str, markers: tuple[str, ...]) -> list[tuple[str, str]]:
    """Obviously correct and quadratic: the first end position where a marker completes."""
    out: list[tuple[str, str]] = []
    start = 0
    end = 1
    while end <= len(text):
        done = [m for m in markers if text[start:end].endswith(m)]
        if done:
            marker = max(done, key=len)
            if end - len(marker) > start:
                out.append(("text", text[start : end - len(marker)]))
            out.append(("marker", marker))
            start = end
        end += 1
    if start < len(text):
        out.append(("text", text[start:]))
    return out


def test_marker_split_at_every_point_is_held_then_found() -> None:
    text = "Sure.\n<tool_call>{}</tool_call>"
    for cut in range(len(text) + 1):
        assert scan_all(MarkerScanner(MARKERS), [text[:cut], text[cut:]]) == [
            ("text", "Sure.\n"),
            ("marker", "<tool_call>"),
            ("text", "{}"),
            ("marker", "</tool_call>"),
        ]


def test_possible_prefix_is_held_not_shown() -> None:
    scanner = MarkerScanner(MARKERS)
    assert scanner.scan("checking now <tool_ca") == ("checking now ", None, 21)
    assert scanner.held == "<tool_ca"
    assert scanner.scan("rrot") == ("<tool_carrot", None, 4)
    assert scanner.held == ""


def test_overlapping_prefixes_restart_inside_the_held_text() -> None:
    assert scan_all(MarkerScanner(MARKERS), list("a<<tool_call>b</<think>")) == [
        ("text", "a<"),
        ("marker", "<tool_call>"),
        ("text", "b</"),
        ("marker", "<think>"),
    ]


def test_longest_marker_wins_when_two_complete_together() -> None:
    assert scan_all(MarkerScanner(MARKERS), ["x\n</parameter>y</parameter>"]) == [
        ("text", "x"),
        ("marker", "\n</parameter>"),
        ("text", "y"),
        ("marker", "</parameter>"),
    ]


def test_flush_releases_the_held_tail() -> None:
    scanner = MarkerScanner(MARKERS)
    assert scanner.scan("end </thi")[0] == "end "
    assert scanner.flush() == "</thi"
    assert scanner.held == ""


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet="<>/tol_chink\n xparme", max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=12),
)
def test_matches_a_naive_reference_under_any_split(text: str, cuts: list[int]) -> None:
    assert scan_all(MarkerScanner(MARKERS), split_at(text, cuts)) == reference(text, MARKERS)
