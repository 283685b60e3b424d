"""The corpus (tests/data/formats/cases.jsonl), compared as docs/parsing.md says.

Every case of a registered format runs one-shot, one character at a time and in random
splits (hypothesis); the streamed results must equal the one-shot result exactly.
Formats without a parser yet are listed in PENDING_FORMATS, and
`test_corpus_coverage` keeps that list honest in both directions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from responsekit.parsing import available_formats, get_parser

from .parsing_support import Folded, heal, load_cases, run, split_at

CASES = load_cases()
REGISTERED = set(available_formats())

# Catalogue formats whose parser is still to be written (docs/parsing.md, Catalogue).  Remove a format
# from here in the change that registers it.
PENDING_FORMATS: set[str] = set()

RUNNABLE = [c for c in CASES if c["format"] in REGISTERED]


def _parser(case: dict[str, Any]):
    cls = get_parser(case["format"])
    return cls(case["tools"], thinking_open=case["thinking_forced_open"])


def _norm(text: str) -> str | None:
    return text.strip() or None


def _check_expected(result: Folded, case: dict[str, Any]) -> None:
    expected = case["expected"]
    assert _norm(result.reasoning) == expected["reasoning_content"]
    assert _norm(result.content) == expected["content"]
    assert [c.name for c in result.calls] == [c["name"] for c in expected["tool_calls"]]
    for call, want in zip(result.calls, expected["tool_calls"], strict=True):
        if case["partial"]:
            arguments = heal(call.arguments)
        else:
            assert call.ended
            arguments = json.loads(call.arguments)
        assert arguments == want["arguments"]
        if "id" in want:
            assert call.id == want["id"]
    assert len({c.id for c in result.calls}) == len(result.calls), "ids must be unique"


def _reference(case: dict[str, Any]) -> Folded:
    return run(_parser(case), [case["raw"]], finish=not case["partial"])


@pytest.mark.parametrize("case", RUNNABLE, ids=[c["id"] for c in RUNNABLE])
def test_one_shot(case: dict[str, Any]) -> None:
    _check_expected(_reference(case), case)


@pytest.mark.parametrize("case", RUNNABLE, ids=[c["id"] for c in RUNNABLE])
def test_char_by_char(case: dict[str, Any]) -> None:
    result = run(_parser(case), list(case["raw"]), finish=not case["partial"])
    _check_expected(result, case)
    keep_ids = any("id" in c for c in case["expected"]["tool_calls"])
    assert result.comparable(keep_ids) == _reference(case).comparable(keep_ids)


@pytest.mark.parametrize("case", RUNNABLE, ids=[c["id"] for c in RUNNABLE])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_splits(case: dict[str, Any], data: st.DataObject) -> None:
    raw = case["raw"]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=min(len(raw), 40)))
    result = run(_parser(case), split_at(raw, cuts), finish=not case["partial"])
    keep_ids = any("id" in c for c in case["expected"]["tool_calls"])
    assert result.comparable(keep_ids) == _reference(case).comparable(keep_ids)


@pytest.mark.parametrize("case", RUNNABLE, ids=[c["id"] for c in RUNNABLE])
def test_prefix_snapshots_only_grow(case: dict[str, Any]) -> None:
    """Every prefix's snapshot heals to valid JSON, and finishing any prefix is valid."""
    raw = case["raw"]
    for end in range(len(raw) + 1):
        snapshot = run(_parser(case), [raw[:end]], finish=False)
        for call in snapshot.calls:
            heal(call.arguments)
        final = run(_parser(case), [raw[:end]], finish=True)
        for call in final.calls:
            assert call.ended
            json.loads(call.arguments)


def test_corpus_coverage() -> None:
    """Each registered format has cases; each unregistered one is listed as pending."""
    corpus = {c["format"] for c in CASES}
    assert not REGISTERED - corpus, f"registered formats without cases: {REGISTERED - corpus}"
    assert corpus - REGISTERED == PENDING_FORMATS, (
        f"still unregistered: {sorted(corpus - REGISTERED)}; "
        f"PENDING_FORMATS lists: {sorted(PENDING_FORMATS)}"
    )
