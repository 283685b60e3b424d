"""JsonValueStreamer, JsonStringArgs and JsonCallReader."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from responsekit.canonical.events import ToolCallDelta, ToolCallEnd, ToolCallStart
from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.json_stream import JsonCallReader, JsonStringArgs, JsonValueStreamer

from .parsing_support import fold, heal, split_at


def stream(chunks: list[str], streamer: JsonValueStreamer | JsonStringArgs | None = None):
    """Feed chunks until the value ends; return (emitted pieces, text left over)."""
    streamer = streamer or JsonValueStreamer()
    pieces: list[str] = []
    rest = ""
    for i, chunk in enumerate(chunks):
        emitted, pos = streamer.feed(chunk)
        pieces.append(emitted)
        if streamer.done or streamer.failed:
            rest = chunk[pos:] + "".join(chunks[i + 1 :])
            break
    return pieces, rest


def test_closing_marker_inside_a_string_does_not_end_the_value() -> None:
    value = '{"content": "a </tool_call> b \\" } ] still inside", "n": 1}'
    pieces, rest = stream(list(value + "\n</tool_call>"))
    assert "".join(pieces) == value
    assert rest == "\n</tool_call>"


def test_negative_and_exponent_numbers() -> None:
    value = '{"a": -1.5e3, "b": [-2, 0, -0.25], "c": -7}'
    pieces, rest = stream([value + " tail"])
    assert json.loads("".join(pieces)) == {"a": -1500.0, "b": [-2, 0, -0.25], "c": -7}
    assert rest == " tail"


def test_unicode_escapes_and_surrogate_pairs_are_kept_whole() -> None:
    value = '{"s": "caf\\u00e9 \\ud83d\\ude00!"}'
    streamer = JsonValueStreamer()
    emitted, _ = streamer.feed(value[: value.index("\\ude00")])
    assert emitted.endswith(" ")  # the high surrogate waits for its pair
    heal(emitted)
    rest, _ = streamer.feed(value[value.index("\\ude00") :])
    assert json.loads(emitted + rest) == {"s": "café 😀!"}


def test_partial_key_number_and_literal_are_withheld() -> None:
    assert stream(['{"city": "Par'])[0] == ['{"city": "Par']
    assert "".join(stream(['{"a": 1, "ci'])[0]) == '{"a": 1'
    assert "".join(stream(['{"limit": 12'])[0]) == "{"
    assert "".join(stream(['{"ok": tr'])[0]) == "{"
    assert "".join(stream(['{"a": "x\\'])[0]) == '{"a": "x'


def test_close_completes_what_was_emitted() -> None:
    streamer = JsonValueStreamer()
    emitted, _ = streamer.feed('{"a": [1, {"b": "te')
    assert json.loads(emitted + streamer.close()) == {"a": [1, {"b": "te"}]}
    assert JsonValueStreamer().close() == "{}"


def test_lenient_trailing_comma_and_raw_control_characters() -> None:
    assert "".join(stream(['{"a": [1, 2,], "b": 3,}'])[0]) == '{"a": [1, 2], "b": 3}'
    assert json.loads("".join(stream(['{"code": "line1\nline2\tend"}'])[0])) == {
        "code": "line1\nline2\tend"
    }


def test_invalid_json_fails_at_the_offending_character() -> None:
    streamer = JsonValueStreamer()
    emitted, pos = streamer.feed("{'a': 1}")
    assert streamer.failed and pos == 1 and emitted == "{"
    assert json.loads(emitted + streamer.close()) == {}


def test_top_level_number_ends_at_its_delimiter_or_at_close() -> None:
    streamer = JsonValueStreamer()
    assert streamer.feed("-12") == ("", 3)
    assert streamer.close() == "-12"
    pieces, rest = stream(["42<|call|>"])
    assert pieces == ["42"] and rest == "<|call|>"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 1]),
    cuts=st.lists(st.integers(0, 400), max_size=30),
)
def test_any_split_reproduces_the_value_and_every_prefix_heals(
    value: dict, ascii_only: bool, indent: int | None, cuts: list[int]
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    streamer = JsonValueStreamer()
    emitted = ""
    for chunk in split_at(text, cuts):
        piece, _pos = streamer.feed(chunk)
        emitted += piece
        assert not streamer.failed
        heal(emitted)  # what was surfaced so far is always a healable prefix
    assert streamer.done
    assert json.loads(emitted) == value


def test_double_encoded_arguments_are_decoded_as_they_stream() -> None:
    encoded = json.dumps(json.dumps({"city": "Paris", "n": [1, -2]}))
    pieces, rest = stream(list(encoded + "}"), JsonStringArgs())
    assert json.loads("".join(pieces)) == {"city": "Paris", "n": [1, -2]}
    assert rest == "}"


def reader_events(text: str, **kwargs) -> tuple[JsonCallReader, list]:
    out = EventBuffer()
    reader = JsonCallReader(out, **kwargs)
    events = []
    for ch in text:
        reader.feed(ch)
        events += out.take()
    return reader, events


def test_call_starts_when_the_name_is_complete_and_args_stream() -> None:
    reader, events = reader_events('{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert reader.done
    assert isinstance(events[0], ToolCallStart) and events[0].name == "get_weather"
    assert (
        "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == '{"city": "Paris"}'
    )


def test_arguments_before_the_name_are_held_until_it_arrives() -> None:
    reader, events = reader_events('{"arguments": {"q": "x"}, "id": "c1", "name": "search"}')
    assert reader.done
    folded = fold([*events, ToolCallEnd(0)])
    assert [(c.name, c.id, c.arguments) for c in folded.calls] == [("search", "c1", '{"q": "x"}')]


def test_unknown_name_or_member_rejects_the_envelope() -> None:
    reader, events = reader_events('{"name": "Bob", "age": 3}', names={"get_weather"})
    assert reader.rejected and events == []
    reader, events = reader_events('{"title": "x"}', names={"get_weather"}, strict=True)
    assert reader.rejected and events == []


def test_missing_arguments_become_an_empty_object() -> None:
    reader, events = reader_events('{"name": "now"}')
    assert reader.done
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == "{}"


def test_a_name_repeated_after_the_call_started_is_ignored() -> None:
    """The call was emitted at the first name; a second one starts no second call (it used to
    leave the first without arguments)."""
    reader, events = reader_events('{"name": "f", "name": "g", "arguments": {"n": 1}}')
    assert reader.done
    folded = fold([*events, ToolCallEnd(0)])
    assert [(c.name, c.arguments) for c in folded.calls] == [("f", '{"n": 1}')]
