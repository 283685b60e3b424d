"""PythonCallReader / PythonCallList: pythonic calls read incrementally."""

from __future__ import annotations

import json

import pytest

from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.pyliteral import PythonCallList, python_literal

from .parsing_support import Folded, fold, heal, split_at


def read_list(chunks: list[str], *, finish: bool = True) -> tuple[Folded, str]:
    out = EventBuffer()
    reader = PythonCallList(out)
    events = []
    rest = ""
    for k, chunk in enumerate(chunks):
        pos = reader.feed(chunk)
        events += out.take()
        if reader.done or reader.failed:
            rest = chunk[pos:] + "".join(chunks[k + 1 :])
            break
    if finish:
        reader.close()
        out.end_call()
        events += out.take()
    return fold(events), rest


def calls(folded: Folded) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in folded.calls]


SOURCE = (
    '[get_weather(city="Paris", days=-3, hours=[1, 2], ok=True, x=None), '
    "search(query='it\\'s \\u00e9 \"q\"', limit=5, opts={'a': (1, 2)}, json_style=true), "
    'now(), doc(text="""a "quoted" "" line\nnext""", empty=\'\')]'
)
EXPECTED = [
    ("get_weather", {"city": "Paris", "days": -3, "hours": [1, 2], "ok": True, "x": None}),
    ("search", {"query": 'it\'s é "q"', "limit": 5, "opts": {"a": [1, 2]}, "json_style": True}),
    ("now", {}),
    ("doc", {"text": 'a "quoted" "" line\nnext', "empty": ""}),
]


@pytest.mark.parametrize("step", [0, 1, 2, 3, 7])
def test_calls_and_literals_under_splits(step: int) -> None:
    chunks = (
        [SOURCE + " tail"] if step == 0 else split_at(SOURCE + " tail", list(range(0, 400, step)))
    )
    folded, rest = read_list(chunks)
    assert calls(folded) == EXPECTED
    assert rest == " tail"


def test_partial_snapshot_streams_strings_and_withholds_other_values() -> None:
    folded, _ = read_list(["[get_weather(city='Ams"], finish=False)
    assert heal(folded.calls[0].arguments) == {"city": "Ams"}
    folded, _ = read_list(["[search(query='x', limit=1"], finish=False)
    assert heal(folded.calls[0].arguments) == {"query": "x"}


def test_truncation_completes_the_arguments() -> None:
    folded, _ = read_list(["[search(query='x', limit=1"])
    assert calls(folded) == [("search", {"query": "x", "limit": 1})]


def test_positional_arguments_are_ignored_and_odd_values_kept_as_text() -> None:
    folded, _ = read_list(["[f('a', k=some_name, n=-1.5)]"])
    assert calls(folded) == [("f", {"k": "some_name", "n": -1.5})]


def test_not_a_call_list_fails() -> None:
    out = EventBuffer()
    reader = PythonCallList(out)
    assert reader.feed("Hello") == 0 and reader.failed


def test_python_literal() -> None:
    assert python_literal("[true, null, -2, (1,)]") == [True, None, -2, (1,)]
    with pytest.raises(ValueError):
        python_literal("os.system('x')")


def test_every_prefix_heals_and_finishes_as_valid_json() -> None:
    for end in range(len(SOURCE) + 1):
        snapshot, _ = read_list([SOURCE[:end]], finish=False)
        for call in snapshot.calls:
            heal(call.arguments)
        final, _ = read_list([SOURCE[:end]])
        for call in final.calls:
            assert call.ended
            json.loads(call.arguments)
