"""A streaming parser built from a derived `TemplateSyntax`
(docs/parsing.md, Templates no format knows: the derived parser).

`derived_parser(syntax)` makes a `TaggedParser` subclass whose markers are the ones the
template analysis found (derive.py), so a template no hand-written format knows gets
the same guarantees: reasoning between its own markers, call arguments streamed as they
arrive (JSON through `JsonValueStreamer`/`JsonCallReader`, key-by-key values through
`ArgsWriter`), markers split across deltas held back by `MarkerScanner`s, the same
result on every split, each character read once.

Whitespace around markers is not significant (markers are stripped), and call ids the
template writes are read and dropped: ids are the parser's own, unique per call, so a
grammar may write any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from responsekit.parsing.bare_json import BareJsonParser
from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import (
    STRING_STOPS,
    JsonCallReader,
    JsonValueStreamer,
    string_split,
)
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.xml_args import ArgsWriter, escape
from responsekit.prompting.derive import CallShape, TemplateSyntax

_WS = " \t\r\n"

NAME = "template"
"""The `parser` setting that forces the derived parser."""


class DerivedParser(BareJsonParser):
    """Reads what a `TemplateSyntax` describes; made per syntax by `derived_parser`."""

    name = NAME
    syntax: TemplateSyntax
    shape: CallShape | None = None
    shadowed_stops: tuple[str, ...] = ()
    """End-of-turn markers that start a call marker: dropped from content text."""
    bare_separators = ""  # several calls: `{…}` one after the other, or one per line

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open or self._opened_by_prompt_only())
        shape = self.shape
        self._in_section = False
        self._json = JsonValueStreamer()
        self._args = ArgsWriter(self.schemas, "")
        self._held: list[str] = []
        self._skip_newline = False
        if shape is None:
            return
        stops = self.stop_tokens
        self._section_scan = MarkerScanner((shape.call_open, shape.section_close, *stops))
        self._section_close_scan = MarkerScanner((shape.section_close,))
        self._id_scan = MarkerScanner((shape.id_close,))
        name_ends = (shape.name_close,) if shape.name_close else ("{",)
        if shape.style == "key_value":
            name_ends = (shape.name_close or shape.key_open, shape.key_open, shape.call_close)
        self._name_scan = MarkerScanner(name_ends)
        self._between_scan = MarkerScanner(
            (shape.key_open, shape.call_close, shape.section_close, *stops)
        )
        self._key_scan = MarkerScanner((shape.key_close,))
        value_ends = (shape.value_close, "\n" + shape.value_close) if shape.value_close else ()
        wrap_open, wrap_close = shape.value_wrap
        if wrap_close and shape.value_close:
            value_ends = (wrap_close + shape.value_close, *value_ends)
        self._value_scan = MarkerScanner(value_ends or (shape.key_open, shape.call_close))
        self._value_stops = self._value_scan.starts | STRING_STOPS  # JSON-escaping is a no-op
        self._wrap_open = wrap_open
        self._wrap_seen = 0  # characters of `wrap_open` read at a value's start
        self._close_scan = MarkerScanner(
            (shape.call_close, shape.section_close, shape.call_open, *stops)
        )

    @classmethod
    def _opened_by_prompt_only(cls) -> bool:
        """Reasoning without an opening marker: only the generation prompt opens it, so
        the output always starts inside it."""
        reasoning = cls.syntax.reasoning
        return reasoning is not None and not reasoning[0] and cls.syntax.thinking_open

    @classmethod
    def thinking_open_in(cls, prompt: str) -> bool:
        reasoning = cls.syntax.reasoning
        if reasoning is None:
            return False
        opening, closing = reasoning
        tail = prompt.rstrip()
        if not opening:
            return cls.syntax.thinking_open
        return tail.endswith(opening) and not tail.endswith(closing)

    def _content_text(self, plain: str) -> None:
        """A shadowed stop is released whole: the scanner holds it as the start of the
        call marker it begins, and releases it with what proves it is not one."""
        for stop in self.shadowed_stops:
            plain = plain.replace(stop, "")
        if plain:
            super()._content_text(plain)

    def _content_split(self, text: str) -> tuple[str, str] | None:
        """The fast lane would report a shadowed stop as text: the handlers read it."""
        if any(stop in text for stop in self.shadowed_stops):
            return None
        return super()._content_split(text)

    # --- calls ---------------------------------------------------------------------

    def _content_start(self, text: str, pos: int) -> int:
        """Bare JSON calls (`BareJsonParser`) only where the template's calls are bare
        JSON objects (Llama 3's `{"name": …, "parameters": …}`)."""
        shape = self.shape
        if shape is None or shape.trigger or shape.style != "envelope":
            self.handler = self._content
            return pos
        return super()._content_start(text, pos)

    def _call_handler(self, marker: str) -> Handler:
        shape = self.shape
        assert shape is not None  # a call marker implies a shape
        self._in_section = bool(shape.section_open) and marker == shape.section_open
        return self._section if self._in_section else self._call_start()

    def _section(self, text: str, pos: int) -> int:
        """Inside the calls' section, between calls."""
        shape = self.shape
        assert shape is not None
        if shape.call_open:
            _, marker, pos = self._section_scan.scan(text, pos)
            if marker == shape.call_open:
                self.handler = self._call_start()
            elif marker is not None:
                self.resume()
            return pos
        # Calls without an opening marker (`[{…}, {…}]`): the separator and whitespace
        # are skipped, the closing marker ends the section, anything else is a call.
        n = len(text)
        while pos < n and (text[pos] in _WS or text[pos] in shape.separator):
            pos += 1
        if pos == n:
            return pos
        if shape.section_close and text[pos] == shape.section_close[0]:
            self.handler = self._section_end
        elif shape.style == "envelope" and text[pos] != "{":  # no call: the section was not one
            self.resume()
        else:
            self.handler = self._call_start()
        return pos

    def _section_end(self, text: str, pos: int) -> int:
        _, marker, pos = self._section_close_scan.scan(text, pos)
        if marker is not None:
            self.resume()
        return pos

    def _call_start(self) -> Handler:
        shape = self.shape
        assert shape is not None
        if shape.id_close and not shape.id_after_name:
            return self._call_id
        return self._call_body_start()

    def _call_id(self, text: str, pos: int) -> int:
        """The id the template writes before the name (or after it): read and dropped."""
        _, marker, pos = self._id_scan.scan(text, pos)
        if marker is not None:
            shape = self.shape
            assert shape is not None
            self.handler = self._json_arguments if shape.id_after_name else self._call_body_start()
        return pos

    def _call_body_start(self) -> Handler:
        shape = self.shape
        assert shape is not None
        if shape.style == "envelope":
            self._reader = JsonCallReader(
                self.out, name_keys=(shape.name_key,), args_keys=(shape.args_key,)
            )
            return self._envelope
        self._held.clear()
        return self._name

    def _envelope(self, text: str, pos: int) -> int:
        return self._streamed(self._reader.feed(text, pos), self._call_end)

    def _name(self, text: str, pos: int) -> int:
        plain, marker, pos = self._name_scan.scan(text, pos)
        self._held.append(plain)
        if marker is None:
            return pos
        shape = self.shape
        assert shape is not None
        name = "".join(self._held).strip()
        if shape.call_index:  # `NAME:0`: the call's number is no part of its name
            head, _, number = name.rpartition(shape.call_index)
            name = head if head and number.strip().isdigit() else name
        self.out.start_call(name)
        if shape.style == "name_json":
            self._json = JsonValueStreamer()
            self.handler = self._call_id if shape.id_after_name else self._json_arguments
            if marker == "{":  # no marker between the name and its arguments
                self._replay("{")
            return pos
        self._args = ArgsWriter(self.schemas, name)
        self.out.args(self._args.open())
        if marker == shape.key_open:
            self._held.clear()
            self.handler = self._key
        elif marker == shape.call_close:
            self._end_arguments()
            self._after_call()
        else:
            self.handler = self._between
        return pos

    def _json_arguments(self, text: str, pos: int) -> int:
        streamer = self._json
        emitted, pos = streamer.feed(text, pos)
        self.out.args(emitted)
        if streamer.in_string:
            self.fast_lane(ARGS, STRING_STOPS, string_split)
        elif streamer.done or streamer.failed:
            if streamer.failed:
                self.out.args(streamer.close())
            self.out.end_call()
            self.handler = self._call_end
        return pos

    def _between(self, text: str, pos: int) -> int:
        """Key by key: between arguments."""
        shape = self.shape
        assert shape is not None
        _, marker, pos = self._between_scan.scan(text, pos)
        if marker is None:
            return pos
        if marker == shape.key_open:
            self._held.clear()
            self.handler = self._key
            return pos
        self._end_arguments()
        if marker == shape.call_close:
            self._after_call()
        else:
            self.resume()
        return pos

    def _key(self, text: str, pos: int) -> int:
        plain, marker, pos = self._key_scan.scan(text, pos)
        self._held.append(plain)
        if marker is not None:
            shape = self.shape
            assert shape is not None
            header = "".join(self._held)
            key = header.split(shape.key_name_end)[0] if shape.key_name_end else header
            self.out.args(self._args.begin(key.strip()))
            self._skip_newline = True
            self._wrap_seen = 0
            self.handler = self._value_start
        return pos

    def _value_start(self, text: str, pos: int) -> int:
        """A value's start: one line break is dropped, and the markup wrapper if the
        template writes one (held until it is complete or known not to be one)."""
        if self._skip_newline:
            self._skip_newline = False
            if text[pos] == "\n":
                return pos + 1
        wrap = self._wrap_open
        seen = self._wrap_seen
        n = len(text)
        while seen < len(wrap) and pos < n and text[pos] == wrap[seen]:
            seen, pos = seen + 1, pos + 1
        self._wrap_seen = seen
        if seen == len(wrap) and wrap:
            self.handler = self._value
        elif pos < n:  # not the wrapper: what was read of it is value text
            self.handler = self._value
            if seen:
                self._replay(wrap[:seen])
        return pos

    def _value(self, text: str, pos: int) -> int:
        scan = self._value_scan
        plain, marker, pos = scan.scan(text, pos)
        self.out.args(self._args.value(plain))
        if marker is None:
            if scan.resting and self._args.streaming:
                self.fast_lane(ARGS, self._value_stops, self._split_value)
            return pos
        self.out.args(self._args.end())
        self.handler = self._between
        return pos

    def _split_value(self, text: str) -> tuple[str, str] | None:
        """The fast lane of a streaming string value: its JSON text up to a possible end."""
        parts = self._value_scan.split(text)
        return None if parts is None else (escape(parts[0]), parts[1])

    def _end_arguments(self) -> None:
        self.out.args(self._args.close())
        self.out.end_call()

    def _call_end(self, text: str, pos: int) -> int:
        """After a call's arguments: its closing marker, if the template writes one.

        Whitespace waits; other text means the model moved on without closing the call
        and is read again as what follows it (a marker found with it included)."""
        shape = self.shape
        assert shape is not None
        if not shape.call_close:
            self._after_call()
            return pos
        plain, marker, pos = self._close_scan.scan(text, pos)
        if plain.strip():
            self.resume()
            self._replay(plain + (marker or ""))
            return pos
        if marker is None:
            return pos
        if marker == shape.call_close:
            self._after_call()
        elif marker == shape.call_open:
            self.handler = self._call_start()
        else:
            self.resume()
        return pos

    def _after_call(self) -> None:
        if self._in_section:
            self.handler = self._section
        else:
            self.resume()

    def _finish_call(self) -> None:
        super()._finish_call()  # a bare call
        if self.out.open_call is None:
            return
        if self.handler == self._envelope:
            self._reader.close()
        elif self.handler in (self._json_arguments, self._call_id):  # `_call_id`: after the name
            self.out.args(self._json.close())
        elif self.handler in (self._key, self._value_start, self._value, self._between, self._name):
            self.out.args(self._args.close())


@lru_cache(maxsize=64)
def derived_parser(syntax: TemplateSyntax) -> type[DerivedParser]:
    """The parser class for `syntax` (one per syntax, shared)."""
    shape = syntax.calls
    reasoning = syntax.reasoning
    markers = (shape.trigger,) if shape is not None and shape.trigger else ()
    # An end-of-turn marker that starts a call marker (GigaChat's `<|message_sep|>`
    # before `function call`) is no marker of the scanners: it would cut the call marker.
    # It is dropped from the text they release instead (`_content_text`).
    stops, shadowed = [], []
    for stop in (*syntax.stops, *filter(None, syntax.content)):
        (shadowed if any(marker.startswith(stop) for marker in markers) else stops).append(stop)
    attributes = {
        "syntax": syntax,
        "shape": shape,
        "reasoning_open": (reasoning[0] or None) if reasoning else None,
        "reasoning_close": reasoning[1] if reasoning else None,
        "stop_tokens": tuple(stops),
        "shadowed_stops": tuple(shadowed),
        "call_markers": markers,
    }
    if shape is not None:  # where a bare envelope's name and arguments are
        attributes |= {"bare_name_keys": (shape.name_key,), "bare_args_keys": (shape.args_key,)}
    return type("DerivedParser", (DerivedParser,), attributes)
