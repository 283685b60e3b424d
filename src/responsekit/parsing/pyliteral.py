"""Pythonic calls (`[get_weather(city="Paris", days=-3), now()]`), read incrementally.

For the pythonic, llama4_pythonic, lfm2_pythonic, olmo3_pythonic and Llama-3 builtin
formats.  `PythonCallReader` reads one `name(k=v, …)` call and emits it as a tool call:
the call starts at `(`, a string value streams as JSON-escaped text as it arrives
(escapes decoded one at a time), and any other value is held until its closing `,` or
`)` and then evaluated once with `ast.literal_eval`, so `-3`, `True`/`None`, tuples and
the JSON spellings `true`/`false`/`null` all work (formats.md §3.14).  A value that is
no literal falls back to its source text.  `PythonCallList` reads `[call, call, …]`.
"""

from __future__ import annotations

import ast
import json
from json.encoder import encode_basestring
from typing import Any

from responsekit.parsing.emit import EventBuffer

_WS = frozenset(" \t\r\n")
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_NAME = _IDENT | {"."}
_JSON_NAMES = {"true": True, "false": False, "null": None}
_OPEN = {"(": ")", "[": "]", "{": "}"}
_ESCAPE_DIGITS = {"x": 2, "u": 4, "U": 8}

# Reader states.
(
    _NAME_WS,
    _NAME_CHARS,
    _ARGS,
    _KEY,
    _EQUALS,
    _VALUE,
    _QUOTE1,
    _QUOTE2,
    _STR,
    _ESC,
    _OTHER,
    _AFTER,
) = range(12)
_DONE = 100
_FAIL = 101


class _JsonNames(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_NAMES:
            return ast.copy_location(ast.Constant(_JSON_NAMES[node.id]), node)
        return node


def python_literal(source: str) -> Any:
    """The value of a Python (or JSON-spelled) literal; raises ValueError if it is none."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
        value = ast.literal_eval(_JsonNames().visit(tree).body)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a literal: {source!r}") from exc
    return value


def _to_json(source: str) -> str:
    try:
        value = python_literal(source)
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_jsonable)
    except (ValueError, TypeError):
        return encode_basestring(source.strip())


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(type(value).__name__)


class PythonCallReader:
    """Reads one `name(k=v, …)` call from a stream and emits it through `out`.

    Positional arguments are read and ignored (no parameter name to give them).
    """

    __slots__ = (
        "_out",
        "_state",
        "_chars",
        "_key",
        "_sep",
        "_quote",
        "_triple",
        "_quotes",
        "_esc",
        "_depth",
        "_inner_quote",
        "name",
    )

    def __init__(self, out: EventBuffer) -> None:
        self._out = out
        self._state = _NAME_WS
        self._chars: list[str] = []
        self._key: str | None = None
        self._sep = ""
        self._quote = ""
        self._triple = False
        self._quotes = 0  # closing quotes seen so far in a triple-quoted string
        self._esc: list[str] = []
        self._depth: list[str] = []
        self._inner_quote = ""
        self.name: str | None = None

    @property
    def done(self) -> bool:
        """The closing parenthesis was read."""
        return self._state == _DONE

    @property
    def failed(self) -> bool:
        """The text is not a call; scanning stopped at the offending character."""
        return self._state == _FAIL

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the call ends or fails; return the position."""
        n = len(text)
        i = pos
        while i < n and self._state < _DONE:
            i = self._step(text, i)
        return i

    def close(self) -> None:
        """End of stream inside the call: complete the arguments emitted so far."""
        if self.name is None or self._state >= _DONE:
            return
        state = self._state
        if state == _OTHER and self._key is not None and not self._depth:
            self._emit_value(_to_json("".join(self._chars)))
        elif state in (_STR, _ESC, _QUOTE1, _QUOTE2) and self._key is not None:
            if state in (_QUOTE1, _QUOTE2):
                self._string_start()
            self._out.args('"')
        self._out.args("}")
        self._state = _DONE

    def _step(self, text: str, i: int) -> int:
        state = self._state
        c = text[i]
        if state == _STR:
            return self._string_chars(text, i)
        if state == _OTHER:
            return self._other_chars(text, i)
        if state == _ESC:
            self._esc.append(c)
            if self._escape_complete():
                escape = "".join(self._esc)
                self._esc.clear()
                self._state = _STR
                if self._key is not None:
                    try:
                        decoded = ast.literal_eval(f'"{escape}"')
                    except (SyntaxError, ValueError):
                        decoded = escape
                    self._out.args(encode_basestring(decoded)[1:-1])
            return i + 1
        if state == _QUOTE1:  # after an opening quote
            if c == self._quote:
                self._state = _QUOTE2
                return i + 1
            self._string_start()
            return i
        if state == _QUOTE2:  # `""`: an empty string, or the start of `"""`
            self._string_start()
            if c == self._quote:
                self._triple = True
                return i + 1
            self._string_end()
            return i
        if c in _WS and state != _NAME_CHARS:
            return i + 1
        if state in (_NAME_WS, _NAME_CHARS):
            if c in _NAME:
                self._chars.append(c)
                self._state = _NAME_CHARS
            elif c == "(" and self._chars:
                self.name = "".join(self._chars)
                self._chars.clear()
                self._out.start_call(self.name)
                self._out.args("{")
                self._state = _ARGS
            else:
                self._state = _FAIL
                return i
            return i + 1
        if state == _ARGS:
            if c == ")":
                self._out.args("}")
                self._state = _DONE
            elif c == ",":
                pass
            elif c in _IDENT and not c.isdigit():
                self._chars = [c]
                self._state = _KEY
            else:  # a positional argument: read it, emit nothing
                self._key = None
                self._state = _VALUE
                return i
            return i + 1
        if state == _KEY:
            if c in _IDENT:
                self._chars.append(c)
                return i + 1
            self._state = _EQUALS
            return i
        if state == _EQUALS:
            if c == "=":
                self._key = "".join(self._chars)
                self._chars.clear()
                self._state = _VALUE
                return i + 1
            # `f(x)`: a positional name; treat it as a value with no key
            self._key = None
            self._state = _OTHER
            return i
        if state == _VALUE:
            if c == '"' or c == "'":
                self._quote = c
                self._triple = False
                self._state = _QUOTE1
                return i + 1
            self._chars = []
            self._depth = []
            self._inner_quote = ""
            self._state = _OTHER
            return i
        # _AFTER
        if c == ",":
            self._state = _ARGS
        elif c == ")":
            self._out.args("}")
            self._state = _DONE
        else:
            self._state = _FAIL
            return i
        return i + 1

    def _string_start(self) -> None:
        self._state = _STR
        self._quotes = 0
        if self._key is not None:
            self._emit_member()
            self._out.args('"')

    def _string_end(self) -> None:
        if self._key is not None:
            self._out.args('"')
        self._state = _AFTER

    def _string_chars(self, text: str, i: int) -> int:
        quote = self._quote
        n = len(text)
        j = i
        while j < n:
            c = text[j]
            if c == quote:
                if not self._triple:
                    self._emit_string(text[i:j])
                    self._string_end()
                    return j + 1
                if j > i:
                    self._emit_string(text[i:j])
                self._quotes += 1
                if self._quotes == 3:
                    self._string_end()
                return j + 1
            if c == "\\":
                self._emit_string(text[i:j])
                self._esc = ["\\"]
                self._state = _ESC
                return j + 1
            j += 1
        self._emit_string(text[i:j])
        return j

    def _emit_string(self, chunk: str) -> None:
        if self._quotes:  # quotes inside a triple-quoted string that did not close it
            chunk = self._quote * self._quotes + chunk
            self._quotes = 0
        if chunk and self._key is not None:
            self._out.args(encode_basestring(chunk)[1:-1])

    def _escape_complete(self) -> bool:
        esc = self._esc
        kind = esc[1] if len(esc) > 1 else ""
        if not kind:
            return False
        if kind in _ESCAPE_DIGITS:
            return len(esc) == 2 + _ESCAPE_DIGITS[kind]
        if kind == "N":
            return esc[-1] == "}"
        return True

    def _other_chars(self, text: str, i: int) -> int:
        """A non-string value: held until a `,` or `)` outside brackets and strings."""
        chars, depth = self._chars, self._depth
        n = len(text)
        while i < n:
            c = text[i]
            if self._inner_quote:
                chars.append(c)
                if c == "\\" and i + 1 < n:
                    chars.append(text[i + 1])
                    i += 1
                elif c == self._inner_quote:
                    self._inner_quote = ""
            elif c == '"' or c == "'":
                self._inner_quote = c
                chars.append(c)
            elif c in _OPEN:
                depth.append(_OPEN[c])
                chars.append(c)
            elif depth and c == depth[-1]:
                depth.pop()
                chars.append(c)
            elif not depth and (c == "," or c == ")"):
                if self._key is not None:
                    self._emit_value(_to_json("".join(chars)))
                self._chars = []
                self._state = _AFTER
                return i
            else:
                chars.append(c)
            i += 1
        return i

    def _emit_value(self, value_json: str) -> None:
        self._emit_member()
        self._out.args(value_json)

    def _emit_member(self) -> None:
        self._out.args(f"{self._sep}{encode_basestring(self._key or '')}: ")
        self._sep = ", "


class PythonCallList:
    """Reads `[call, call, …]` (whitespace allowed between the items)."""

    __slots__ = ("_out", "_state", "_call", "done", "failed")

    def __init__(self, out: EventBuffer) -> None:
        self._out = out
        self._state = 0  # 0 before '[', 1 expecting a call or ']', 2 in a call, 3 after a call
        self._call = PythonCallReader(out)
        self.done = False
        self.failed = False

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the list ends or fails; return the position."""
        n = len(text)
        while pos < n and not (self.done or self.failed):
            if self._state == 2:
                pos = self._call.feed(text, pos)
                if self._call.done:
                    self._out.end_call()
                    self._state = 3
                elif self._call.failed:
                    self.failed = True
                continue
            c = text[pos]
            if c in _WS:
                pos += 1
            elif self._state == 0:
                if c != "[":
                    self.failed = True
                    break
                self._state = 1
                pos += 1
            elif c == "]":
                self.done = True
                pos += 1
            elif c == "," and self._state == 3:
                self._state = 1
                pos += 1
            elif self._state == 1:
                self._call = PythonCallReader(self._out)
                self._state = 2
            else:
                self.failed = True
        return pos

    def close(self) -> None:
        """End of stream inside the list: complete a call still open."""
        if self._state == 2:
            self._call.close()
            self._out.end_call()
