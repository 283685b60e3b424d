"""XML-style calls: functions holding parameters, each value bare text, in a call block.

Qwen3-Coder (`<function=NAME><parameter=K>V</parameter></function>`), Seed-OSS, MiniMax-M2
(`<invoke name="NAME"><parameter name="K">`) and DeepSeek-V3.2's DSML write the same
structure with different tags: `XmlCallParser` is its state machine once, and a format
declares its tags and, where it differs, how a tag's header gives a name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, ClassVar

from responsekit.parsing.base import Handler
from responsekit.parsing.emit import ARGS
from responsekit.parsing.json_stream import STRING_STOPS
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.schema import ToolSchemas
from responsekit.parsing.tagged import TaggedParser
from responsekit.parsing.xml_args import ArgsWriter, escape


class XmlCallParser(TaggedParser):
    """Reads `call_markers` BLOCK `function_open`HEADER> (`param_open`HEADER>VALUE
    `param_close`)… `function_close` … `block_close`.

    A header runs to `>` and gives the name (`_call_name`, `_param_name`); values are
    typed by the tool schema (`ArgsWriter`, through `self._types`).  With `trim_newlines`
    a value loses one line break on each side and also ends at the next `\\n` +
    `param_open` or `\\n` + `function_close` (a missing `param_close`), so markup inside
    it is kept; without, it ends only at `param_close`, verbatim.  A call marker that is
    `function_open` itself starts a function outside any block, which ends with it.

    The value lane's shortcut (`_split_value`) relies on every value end containing `</`
    or `<p`: closing tags start with `</`, and with `trim_newlines` `param_open` with `<p`.
    """

    block_close: ClassVar[str]
    other_block_closes: ClassVar[tuple[str, ...]] = ()
    """More markers ending a block, where a format's versions name it differently (DSML)."""
    function_open: ClassVar[str]
    function_close: ClassVar[str]
    param_open: ClassVar[str]
    param_close: ClassVar[str]
    trim_newlines: ClassVar[bool] = True
    value_ends: ClassVar[tuple[str, ...]]
    """The markers ending a value, derived from the tags."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        close = cls.param_close
        cls.value_ends = (
            ("\n" + close, close, "\n" + cls.param_open, "\n" + cls.function_close)
            if cls.trim_newlines
            else (close,)
        )

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        cls = type(self)
        block_closes = (cls.block_close, *cls.other_block_closes)
        self._block = MarkerScanner((cls.function_open, *block_closes))
        self._header_end = MarkerScanner((">",))
        self._params = MarkerScanner((cls.param_open, cls.function_close, *block_closes))
        self._value_end = MarkerScanner(cls.value_ends)
        self._value_stops = self._value_end.starts | STRING_STOPS  # JSON-escaping is a no-op
        # Value ends of `trim_newlines` that skip `param_close` (never found otherwise).
        self._next_param = "\n" + cls.param_open
        self._call_end = "\n" + cls.function_close
        self._header: list[str] = []
        self._types: ToolSchemas = self.schemas
        self._args = ArgsWriter(ToolSchemas(), "")
        self._skip_newline = False
        self._bare = False  # a function outside a block

    def _call_name(self, header: str) -> str:
        """The function's name from the text between `function_open` and `>`."""
        return header.strip()

    def _param_name(self, header: str) -> str:
        """The parameter's name from the text between `param_open` and `>`."""
        return header.strip()

    def _call_handler(self, marker: str) -> Handler:
        self._bare = marker == self.function_open
        if self._bare:
            self._header.clear()
            return self._function_header
        return self._block_body

    def _block_body(self, text: str, pos: int) -> int:
        """Inside the block, between functions."""
        _, marker, pos = self._block.scan(text, pos)
        if marker == self.function_open:
            self._header.clear()
            self.handler = self._function_header
        elif marker:
            self.resume()
        return pos

    def _function_header(self, text: str, pos: int) -> int:
        plain, marker, pos = self._header_end.scan(text, pos)
        self._header.append(plain)
        if marker:
            name = self._call_name("".join(self._header))
            self.out.start_call(name)
            self._args = ArgsWriter(self._types, name)
            self.out.args(self._args.open())
            self.handler = self._parameters
        return pos

    def _parameters(self, text: str, pos: int) -> int:
        """Inside a function, between parameters."""
        _, marker, pos = self._params.scan(text, pos)
        if marker == self.param_open:
            self._header.clear()
            self.handler = self._param_header
        elif marker:
            self._end_call()
            if marker != self.function_close:  # a block's end: `function_close` was missing
                self.resume()
        return pos

    def _param_header(self, text: str, pos: int) -> int:
        plain, marker, pos = self._header_end.scan(text, pos)
        self._header.append(plain)
        if marker:
            self.out.args(self._args.begin(self._param_name("".join(self._header))))
            self._skip_newline = self.trim_newlines
            self.handler = self._value
        return pos

    def _value(self, text: str, pos: int) -> int:
        if self._skip_newline:
            self._skip_newline = False
            if text[pos] == "\n":
                return pos + 1
        scan = self._value_end
        plain, marker, pos = scan.scan(text, pos)
        self.out.args(self._args.value(plain))
        if marker is None:
            if scan.resting and self._args.streaming:
                self.fast_lane(ARGS, self._value_stops, self._split_value)
            return pos
        self.out.args(self._args.end())
        if marker == self._next_param:
            self._header.clear()
            self.handler = self._param_header
        elif marker == self._call_end:
            self._end_call()
        else:
            self.handler = self._parameters
        return pos

    def _split_value(self, text: str) -> tuple[str, str] | None:
        """The fast lane of a streaming string value: its JSON text, up to a possible end.

        Every value end contains `</` or `<p`, and a cut one ends the text with `<` or
        a line break (`</par`, `\\n<p`, `\\n`): text with neither (`a < b`, `<div`, a
        line of code) is all value except a final line break, with no marker search.
        """
        if "<" in text and ("</" in text or "<p" in text or text[-1] == "<"):
            parts = self._value_end.split(text)
            return None if parts is None else (escape(parts[0]), parts[1])
        if text[-1] == "\n":
            return encode_basestring(text[:-1])[1:-1], "\n"
        return encode_basestring(text)[1:-1], ""

    def _end_call(self) -> None:
        self.out.args(self._args.close())
        self.out.end_call()
        self.handler = self._block_body
        if self._bare:
            self.resume()

    def _finish_call(self) -> None:
        if self.out.open_call is not None:
            self._value_end.reset()  # a held `\n</para…` is the cut end marker
            self.out.args(self._args.close())
