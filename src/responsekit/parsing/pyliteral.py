"""Pythonic calls (`[get_weather(city="Paris", days=-3), now()]`), read incrementally.

For the pythonic, llama4_pythonic, lfm2_pythonic, olmo3_pythonic and Llama-3 builtin
formats.  `PythonCallReader` reads one `name(k=v, …)` call and emits it as a tool call
whose arguments stream as JSON.  Each keyword value goes through `PythonValue`, which
converts Python literal syntax to JSON character by character, never re-reading what it
has seen (docs/parsing.md, pitfall 14):

* strings stream JSON-escaped as they arrive: quotes `'`/`"`, triple quotes, prefixes
  (`r`, `b`, `f`), escapes decoded one at a time, implicit concatenation `"a" "b"`;
* lists, tuples and sets stream as JSON arrays, dicts as JSON objects (a key is held
  until its value starts, so every emitted prefix heals);
* a bare token (`-3`, `1e-3`, `0x1F`, `True`, `None`, or the JSON spellings `true`,
  `null`) is held until it ends and then converted on its own;
* what is no literal (`x.y`, `f(1)`) becomes its source text as a string, and junk is
  skipped up to the next `,` or closing bracket, so the output always stays valid JSON.

`CallList` reads `[call, call, …]` (or calls one after another) whose items are
pythonic calls or, for LFM2's JSON variant and the JSON-array formats, JSON envelopes.
"""

from __future__ import annotations

import ast
import json
import math
import unicodedata
from collections.abc import Callable, Collection
from json.encoder import encode_basestring
from typing import Any, Protocol

from responsekit.parsing.emit import EventBuffer

_WS = frozenset(" \t\r\n")
_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT = _IDENT_START | frozenset("0123456789")
_NAME = _IDENT | {"."}
_QUOTES = frozenset("'\"")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(")]}")
_TOKEN_END = frozenset(",:()[]{}'\"")
_STRING_PREFIXES = frozenset({"r", "u", "b", "f", "br", "rb", "fr", "rf"})
_JSON_NAMES = {"true": True, "false": False, "null": None}
_TOKENS = {
    "True": "true",
    "true": "true",
    "False": "false",
    "false": "false",
    "None": "null",
    "null": "null",
}
_SIMPLE_ESCAPES = {
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\n": "",
}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_OCTAL = frozenset("01234567")
_MAX_NAME = 100  # longer than any Unicode character name in `\N{…}`

# Container kinds; _BRACE and _PAREN are `{` and `(` whose first element is not read
# yet (dict or set, tuple or grouping), so nothing of them is emitted.
_LIST, _DICT, _BRACE, _PAREN = range(4)

# PythonValue modes.
(
    _V_VALUE,
    _V_KEY,
    _V_COLON,
    _V_OPEN,
    _V_STR,
    _V_ESC,
    _V_BARE,
    _V_AFTER,
    _V_RAW,
    _V_SKIP,
    _V_DONE,
) = range(11)

# Roles of a string or token: emitted as a value, or held (a dict key, or the first
# element of an undecided `{`/`(`).
_EMIT, _HOLD = 0, 1


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


def _token_json(token: str) -> str | None:
    """JSON for a bare token that is a number or a named constant, else None."""
    named = _TOKENS.get(token)
    if named is not None:
        return named
    try:
        return str(int(token, 0))
    except ValueError:
        pass
    try:
        number = float(token)
    except ValueError:
        pass
    else:
        return json.dumps(number) if math.isfinite(number) else None
    try:
        value = python_literal(token)
    except ValueError:
        return None
    if isinstance(value, float) and not math.isfinite(value):  # `-1e400`
        return None
    return json.dumps(value) if value is None or isinstance(value, (bool, int, float)) else None


def _json_string(text: str) -> str:
    if any("\ud800" <= ch <= "\udfff" for ch in text):  # pairs from `\ud83d\ude00` escapes
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return encode_basestring(text)


class PythonValue:
    """Converts one Python value to JSON as it streams; see the module docstring.

    `feed(text, pos) -> (emitted, pos)` stops at a `,` or `)` outside brackets (not
    consumed), which ends the value (`done`).  `lead` is written before the value's
    first text, so a keyword whose value turns out empty leaves no trace; `started`
    says whether it was written.  With `skip` the value is read and nothing emitted.
    """

    __slots__ = (
        "_closers",
        "_esc",
        "_filled",
        "_held",
        "_inner",
        "_inner_esc",
        "_key",
        "_kinds",
        "_lead",
        "_mode",
        "_nest",
        "_out",
        "_quote",
        "_quote_held",
        "_raw",
        "_role",
        "_run",
        "_text",
        "_token",
        "_triple",
        "started",
    )

    def __init__(self, lead: str = "", *, skip: bool = False) -> None:
        self._lead = lead
        self._mode = _V_SKIP if skip else _V_VALUE
        self._kinds: list[int] = []
        self._closers: list[str] = []
        self._filled: list[bool] = []
        self._key = ""  # the open dict member's `"key": `, written with its value
        self._role = _EMIT
        self._quote = ""
        self._triple = False
        self._raw = False  # an r-string: backslashes are text
        self._run = 0  # quotes seen in a row (opening, or closing a triple string)
        self._text: list[str] = []  # a held string, decoded
        self._token: list[str] = []  # a bare token, or the source of an expression
        self._esc: list[str] = []
        self._nest: list[str] = []  # brackets open in an expression or skipped text
        self._inner = ""  # quote open in an expression or skipped text
        self._inner_esc = False
        self._quote_held = False  # a streamed string's closing quote (`"a" "b"` continues)
        self._held: str | None = None  # JSON of a held token, or None for a held string
        self._out: list[str] = []
        self.started = False

    @property
    def done(self) -> bool:
        """A `,` or `)` outside brackets ended the value."""
        return self._mode == _V_DONE

    def feed(self, text: str, pos: int = 0) -> tuple[str, int]:
        """Consume `text[pos:]` up to the end of the value; return the JSON emitted."""
        out = self._out = []
        n = len(text)
        while pos < n and self._mode != _V_DONE:
            pos = self._step(text, pos)
        return "".join(out), pos

    def close(self) -> str:
        """End of stream: JSON completing what was emitted ("" if nothing was)."""
        out = self._out = []
        mode = self._mode
        if self._role == _EMIT:
            if mode in (_V_OPEN, _V_STR, _V_ESC) or self._quote_held:
                out.append('"')
            elif mode == _V_BARE:
                value = _token_json("".join(self._token).strip())
                if value is not None:
                    self._begin(len(self._kinds) - 1)
                    out.append(value)
        for kind in reversed(self._kinds):
            if kind == _LIST:
                out.append("]")
            elif kind == _DICT:
                out.append("}")
        self._mode = _V_DONE
        return "".join(out)

    # -- dispatch ---------------------------------------------------------------------

    def _step(self, text: str, i: int) -> int:
        mode = self._mode
        if mode == _V_STR:
            return self._string(text, i)
        if mode == _V_BARE:
            return self._bare(text, i)
        if mode == _V_RAW or mode == _V_SKIP:
            return self._source(text, i)
        c = text[i]
        if mode == _V_ESC:
            return self._escape(text, i)
        if mode == _V_OPEN:
            return self._opening(c, i)
        if c in _WS:
            return i + 1
        if mode == _V_VALUE:
            return self._value(c, i)
        if mode == _V_KEY:
            return self._dict_key(c, i)
        return self._after(c, i)  # _V_AFTER, _V_COLON

    def _begin(self, parent: int) -> None:
        """Write what precedes a value's first text: its separator and key, or the lead."""
        out = self._out
        if parent < 0:
            if not self.started:
                out.append(self._lead)
                self.started = True
            return
        if self._filled[parent]:
            out.append(", ")
        else:
            self._filled[parent] = True
        if self._key:
            out.append(self._key)
            self._key = ""

    def _push(self, kind: int, closer: str) -> None:
        self._kinds.append(kind)
        self._closers.append(closer)
        self._filled.append(False)

    def _value(self, c: str, i: int) -> int:
        kinds = self._kinds
        undecided = bool(kinds) and kinds[-1] >= _BRACE
        if undecided and c == self._closers[-1]:  # `{}` or `()`
            self._begin(len(kinds) - 2)
            self._out.append("{}" if kinds[-1] == _BRACE else "[]")
            return self._pop(i)
        if c in _QUOTES or c not in _OPENERS and c not in _CLOSERS and c not in ",:":
            self._role = _HOLD if undecided else _EMIT
            if c in _QUOTES:
                self._text = []
                return self._open_string(c, i)
            self._token = []
            self._mode = _V_BARE
            return i
        if undecided:  # anything else first: `{` is a set, `(` a tuple
            self._decide_list()
            return i
        if c in _OPENERS:
            if c == "[":
                self._begin(len(kinds) - 1)
                self._out.append("[")
                self._push(_LIST, "]")
            else:
                self._push(_BRACE if c == "{" else _PAREN, _OPENERS[c])
            return i + 1
        if not kinds and (c == "," or c == ")"):  # no value at all
            self._mode = _V_DONE
            return i
        if kinds and c in _CLOSERS:  # `[]` or a trailing comma
            return self._close(c, i)
        if c == ",":  # `,,`
            return i + 1
        self._mode = _V_SKIP
        return i

    def _dict_key(self, c: str, i: int) -> int:
        if c == "}":
            return self._close(c, i)
        if c in _QUOTES:
            self._role = _HOLD
            self._text = []
            return self._open_string(c, i)
        if c == "," or c == ":" or c in _OPENERS or c in _CLOSERS:
            self._mode = _V_SKIP
            return i
        self._role = _HOLD
        self._token = []
        self._mode = _V_BARE
        return i

    # -- strings ----------------------------------------------------------------------

    def _open_string(self, quote: str, i: int) -> int:
        if self._role == _EMIT and not self._quote_held:
            self._begin(len(self._kinds) - 1)
            self._out.append('"')
        self._quote_held = False
        self._quote = quote
        self._run = 1
        self._triple = False
        self._mode = _V_OPEN
        return i + 1

    def _opening(self, c: str, i: int) -> int:
        """After an opening quote: three quotes open a triple string, two are empty."""
        if c == self._quote:
            self._run += 1
            if self._run == 3:
                self._triple = True
                self._run = 0
                self._mode = _V_STR
            return i + 1
        if self._run == 2:
            self._run = 0
            self._string_end()
            return i
        self._run = 0
        self._mode = _V_STR
        return i

    def _string(self, text: str, i: int) -> int:
        quote = self._quote
        n = len(text)
        if self._run and text[i] != quote:  # quotes inside a triple string
            self._chars(quote * self._run)
            self._run = 0
        j = i
        while j < n:
            c = text[j]
            if c == quote or c == "\\":
                break
            j += 1
        if j > i:
            self._chars(text[i:j])
        if j == n:
            return j
        if text[j] == "\\":
            self._esc = []
            self._mode = _V_ESC
            return j + 1
        if not self._triple:
            self._string_end()
        else:
            self._run += 1
            if self._run == 3:
                self._run = 0
                self._string_end()
        return j + 1

    def _chars(self, chunk: str) -> None:
        if self._role == _EMIT:
            self._out.append(encode_basestring(chunk)[1:-1])
        else:
            self._text.append(chunk)

    def _escape(self, text: str, i: int) -> int:
        c = text[i]
        esc = self._esc
        if self._raw:
            self._chars("\\" + c)
            self._mode = _V_STR
            return i + 1
        if not esc:
            if c in _SIMPLE_ESCAPES:
                self._decoded(_SIMPLE_ESCAPES[c])
                return i + 1
            if c not in _OCTAL and c not in _HEX_DIGITS and c != "N":
                self._decoded("\\" + c)  # Python keeps unknown escapes
                return i + 1
            esc.append(c)
            return i + 1
        kind = esc[0]
        if kind in _OCTAL:
            if c in _OCTAL and len(esc) < 3:
                esc.append(c)
                if len(esc) < 3:
                    return i + 1
                self._decoded(chr(int("".join(esc), 8)))
                return i + 1
            self._decoded(chr(int("".join(esc), 8)))
            return i  # the character after a short octal escape is text
        if kind == "N" and (len(esc) == 1 and c != "{" or len(esc) > _MAX_NAME):
            self._decoded("\\" + "".join(esc))  # not `\N{NAME}`: kept as written
            return i
        esc.append(c)
        if kind == "N":
            if c != "}":
                return i + 1
            try:
                self._decoded(unicodedata.lookup("".join(esc[2:-1])))
            except KeyError:
                self._decoded("\\" + "".join(esc))
            return i + 1
        if len(esc) <= _HEX_DIGITS[kind]:
            return i + 1
        try:
            self._decoded(chr(int("".join(esc[1:]), 16)))
        except ValueError:
            self._decoded("\\" + "".join(esc))
        return i + 1

    def _decoded(self, chars: str) -> None:
        self._mode = _V_STR
        if len(chars) == 1 and "\ud800" <= chars <= "\udfff" and self._role == _EMIT:
            self._out.append(f"\\u{ord(chars):04x}")
        elif chars:
            self._chars(chars)

    def _string_end(self) -> None:
        self._raw = False
        if self._role == _EMIT:
            self._quote_held = True
            self._mode = _V_AFTER
        else:
            self._held = None
            self._mode = _V_COLON if self._kinds[-1] == _DICT else _V_AFTER

    # -- bare tokens, expressions and skipped text --------------------------------------

    def _bare(self, text: str, i: int) -> int:
        n = len(text)
        j = i
        while j < n and text[j] not in _TOKEN_END:
            j += 1
        if j > i:
            self._token.append(text[i:j])
        if j == n:
            return j
        c = text[j]
        token = "".join(self._token)
        if c in _QUOTES and token.lower() in _STRING_PREFIXES:
            self._raw = "r" in token.lower()
            if self._role == _HOLD:
                self._text = []
            return self._open_string(c, j)
        if c in _QUOTES or c in _OPENERS:  # `f(1)`, `x[0]`: an expression, kept as text
            self._nest = []
            self._inner = ""
            self._mode = _V_RAW
            return j
        token = token.strip()
        value = _token_json(token)
        self._scalar(value if value is not None else encode_basestring(token))
        return j

    def _source(self, text: str, i: int) -> int:
        """An expression (kept as source) or junk (skipped), up to `,` or a closer."""
        keep = self._mode == _V_RAW
        nest = self._nest
        n = len(text)
        start = i
        while i < n:
            c = text[i]
            if self._inner:
                if self._inner_esc:
                    self._inner_esc = False
                elif c == "\\":
                    self._inner_esc = True
                elif c == self._inner:
                    self._inner = ""
            elif c in _QUOTES:
                self._inner = c
            elif c in _OPENERS:
                nest.append(_OPENERS[c])
            elif nest:
                if c == nest[-1]:
                    nest.pop()
            elif c == "," or c in _CLOSERS or (keep and c == ":"):
                if keep:
                    self._token.append(text[start:i])
                    self._scalar(encode_basestring("".join(self._token).strip()))
                    return i
                return self._skipped(c, i)
            i += 1
        if keep:
            self._token.append(text[start:i])
        return i

    def _skipped(self, c: str, i: int) -> int:
        """Skipping stopped at `c`: the next element, or the end of the container."""
        if not self._kinds:
            if c == "," or c == ")":
                self._mode = _V_DONE
                return i
            return i + 1
        if c == ",":
            self._key = ""
            self._mode = _V_KEY if self._kinds[-1] == _DICT else _V_VALUE
            return i + 1
        return self._close(c, i)

    def _scalar(self, value: str) -> None:
        """A token or expression ended; `value` is its JSON."""
        if self._role == _EMIT:
            self._begin(len(self._kinds) - 1)
            self._out.append(value)
            self._mode = _V_AFTER
        else:
            self._held = value
            self._mode = _V_COLON if self._kinds[-1] == _DICT else _V_AFTER

    def _held_json(self) -> str:
        if self._held is None:
            text = "".join(self._text)
            self._text = []
            return _json_string(text)
        return self._held

    # -- between elements ---------------------------------------------------------------

    def _after(self, c: str, i: int) -> int:
        if c in _QUOTES and (self._quote_held or (self._role == _HOLD and self._held is None)):
            return self._open_string(c, i)  # implicit concatenation: "a" "b"
        if self._quote_held:
            self._out.append('"')
            self._quote_held = False
        kinds = self._kinds
        if not kinds:
            if c == "," or c == ")":
                self._mode = _V_DONE
                return i
            self._mode = _V_SKIP
            return i
        kind = kinds[-1]
        if self._mode == _V_COLON:
            held = self._held_json()
            self._role = _EMIT
            if c == ":":
                self._key = (held if held.startswith('"') else f'"{held}"') + ": "
                self._mode = _V_VALUE
                return i + 1
            self._mode = _V_SKIP
            return i
        if kind >= _BRACE:
            return self._decide(c, i)
        if c == ",":
            self._mode = _V_KEY if kind == _DICT else _V_VALUE
            return i + 1
        if c in _CLOSERS:
            return self._close(c, i)
        self._mode = _V_SKIP
        return i

    def _decide(self, c: str, i: int) -> int:
        """After the first element of `{` or `(`: a dict, a set, a tuple or a grouping."""
        kinds = self._kinds
        held = self._held_json()
        self._role = _EMIT
        if kinds[-1] == _BRACE and c == ":":
            self._begin(len(kinds) - 2)
            self._out.append("{")
            kinds[-1] = _DICT
            self._key = (held if held.startswith('"') else f'"{held}"') + ": "
            self._mode = _V_VALUE
            return i + 1
        if kinds[-1] == _PAREN and c == ")":  # `(x)` is x
            self._begin(len(kinds) - 2)
            self._out.append(held)
            return self._pop(i)
        self._decide_list()
        self._out.append(held)
        self._filled[-1] = True
        if c == ",":
            self._mode = _V_VALUE
            return i + 1
        if c == self._closers[-1]:
            return self._close(c, i)
        self._mode = _V_SKIP
        return i

    def _decide_list(self) -> None:
        self._begin(len(self._kinds) - 2)
        self._out.append("[")
        self._kinds[-1] = _LIST
        self._mode = _V_VALUE

    def _close(self, c: str, i: int) -> int:
        """`c` closes the innermost container (a mismatched closer closes it too)."""
        self._out.append("}" if self._kinds[-1] == _DICT else "]")
        if c != self._closers[-1]:
            self._kinds.pop()
            self._closers.pop()
            self._filled.pop()
            self._key = ""
            self._mode = _V_AFTER
            return i
        return self._pop(i)

    def _pop(self, i: int) -> int:
        self._kinds.pop()
        self._closers.pop()
        self._filled.pop()
        self._key = ""
        self._role = _EMIT
        self._mode = _V_AFTER
        return i + 1


# PythonCallReader states.
_P_NAME, _P_ARGS, _P_KEY, _P_EQUALS, _P_VALUE, _P_AFTER = range(6)
_P_DONE = 100
_P_FAIL = 101
_P_REJECT = 102


class PythonCallReader:
    """Reads one `name(k=v, …)` call from a stream and emits it through `out`.

    The call starts at `(`; with `names`, a name not among them is `rejected` and
    nothing is emitted.  Positional arguments are skipped (no parameter name to give
    them).
    """

    __slots__ = ("_chars", "_names", "_out", "_sep", "_state", "_value", "name")

    def __init__(self, out: EventBuffer, names: Collection[str] | None = None) -> None:
        self._out = out
        self._names = names
        self._state = _P_NAME
        self._chars: list[str] = []
        self._sep = ""
        self._value = PythonValue()
        self.name: str | None = None

    @property
    def done(self) -> bool:
        """The closing parenthesis was read."""
        return self._state == _P_DONE

    @property
    def failed(self) -> bool:
        """The text is not a call; scanning stopped at the offending character."""
        return self._state == _P_FAIL

    @property
    def rejected(self) -> bool:
        """The call names a function not in `names`."""
        return self._state == _P_REJECT

    @property
    def started(self) -> bool:
        """The call start was emitted."""
        return self.name is not None

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the call ends or fails; return the position."""
        n = len(text)
        while pos < n and self._state < _P_DONE:
            if self._state == _P_VALUE:
                emitted, pos = self._value.feed(text, pos)
                self._out.args(emitted)
                if self._value.done:
                    self._end_value()
            else:
                pos = self._step(text[pos], pos)
        return pos

    def close(self) -> None:
        """End of stream inside the call: complete the arguments emitted so far."""
        if self.name is None or self._state >= _P_DONE:
            return
        if self._state == _P_VALUE:
            self._out.args(self._value.close())
        self._out.args("}")
        self._state = _P_DONE

    def _step(self, c: str, i: int) -> int:
        state = self._state
        if state == _P_NAME:
            if c in _NAME:
                self._chars.append(c)
                return i + 1
            if c in _WS and not self._chars:
                return i + 1
            if c != "(" or not self._chars:
                self._state = _P_FAIL
                return i
            name = "".join(self._chars)
            if self._names is not None and name not in self._names:
                self._state = _P_REJECT
                return i
            self.name = name
            self._out.start_call(name)
            self._out.args("{")
            self._state = _P_ARGS
            return i + 1
        if c in _WS and state != _P_KEY:
            return i + 1
        if state == _P_ARGS:
            if c == ")":
                return self._end(i)
            if c == ",":
                return i + 1
            if c in _IDENT_START:
                self._chars = [c]
                self._state = _P_KEY
                return i + 1
            self._value = PythonValue(skip=True)  # a positional argument
            self._state = _P_VALUE
            return i
        if state == _P_KEY:
            if c in _IDENT:
                self._chars.append(c)
                return i + 1
            self._state = _P_EQUALS
            return i
        if state == _P_EQUALS:
            if c == "=":
                lead = f"{self._sep}{encode_basestring(''.join(self._chars))}: "
                self._value = PythonValue(lead)
                self._state = _P_VALUE
                return i + 1
            self._value = PythonValue(skip=True)  # `f(x)`: a positional name
            self._state = _P_VALUE
            return i
        # _P_AFTER: the value stopped at `,` or `)`
        if c == ")":
            return self._end(i)
        self._state = _P_ARGS
        return i + 1

    def _end_value(self) -> None:
        if self._value.started:
            self._sep = ", "
        self._state = _P_AFTER

    def _end(self, i: int) -> int:
        self._out.args("}")
        self._state = _P_DONE
        return i + 1


class CallItem(Protocol):
    """One call of a list: a `PythonCallReader`, a `JsonCallReader` or the like."""

    @property
    def done(self) -> bool: ...
    @property
    def failed(self) -> bool: ...
    @property
    def rejected(self) -> bool: ...
    @property
    def started(self) -> bool: ...
    def feed(self, text: str, pos: int = 0) -> int: ...
    def close(self) -> None: ...


ItemFactory = Callable[[str], CallItem | None]
"""Given the first character of an item, the reader for it (None: no item starts here)."""

# CallList states.
_L_START, _L_ITEM, _L_IN, _L_NEXT = range(4)


class CallList:
    """Reads `[item, item, …]`, or with `unbracketed` also items one after another.

    Each item's call is ended when the item is.  A bracketed list is `done` after its
    `]`; an unbracketed one at the first character (not consumed) that starts no item.
    `opened`: the `[` was already read (a marker such as `functools[` includes it).
    `started` says whether any item emitted a call; until one has, items come from
    `first` (default `item`), e.g. readers that accept only declared tools, so that a
    list that may be plain text is decided by its first call.
    """

    __slots__ = (
        "_bracketed",
        "_first",
        "_item",
        "_make",
        "_out",
        "_state",
        "_unbracketed",
        "done",
        "failed",
        "started",
    )

    def __init__(
        self,
        out: EventBuffer,
        item: ItemFactory,
        *,
        first: ItemFactory | None = None,
        unbracketed: bool = False,
        opened: bool = False,
    ) -> None:
        self._out = out
        self._make = item
        self._first = first or item
        self._unbracketed = unbracketed
        self._bracketed = opened
        self._state = _L_ITEM if opened else _L_START
        self._item: CallItem | None = None
        self.done = False
        self.failed = False
        self.started = False

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the list ends or fails; return the position."""
        n = len(text)
        while pos < n and not (self.done or self.failed):
            item = self._item
            if self._state == _L_IN and item is not None:
                pos = item.feed(text, pos)
                self.started = self.started or item.started
                if item.done:
                    self._out.end_call()
                    self._state = _L_NEXT
                elif item.failed or item.rejected:
                    self.failed = True
                continue
            c = text[pos]
            if c in _WS:
                pos += 1
            elif self._state == _L_START and c == "[":
                self._bracketed = True
                self._state = _L_ITEM
                pos += 1
            elif self._bracketed and self._state != _L_START and c == "]":
                self.done = True
                pos += 1
            elif c == "," and self._state == _L_NEXT:
                self._state = _L_ITEM if self._bracketed else _L_NEXT
                pos += 1
            elif self._begin_item(c):
                continue
            elif self._state == _L_NEXT and not self._bracketed:
                self.done = True
            else:
                self.failed = True
        return pos

    def close(self) -> None:
        """End of stream inside the list: complete a call still open."""
        if self._state == _L_IN and self._item is not None:
            self._item.close()
            self._out.end_call()
            self._state = _L_NEXT

    def _begin_item(self, c: str) -> bool:
        if self._state == _L_START and not self._unbracketed:
            return False
        item = (self._make if self.started else self._first)(c)
        if item is None:
            return False
        self._item = item
        self._state = _L_IN
        return True


def python_calls(out: EventBuffer, names: Collection[str] | None = None) -> ItemFactory:
    """Item factory for pythonic calls (`names`: only these make calls)."""

    def make(c: str) -> CallItem | None:
        return PythonCallReader(out, names) if c in _IDENT_START else None

    return make


class PythonCallList(CallList):
    """`[call, call, …]` of pythonic calls (`unbracketed`: or calls one after another).

    With `names`, the first call must name one of them (see `CallList`).
    """

    __slots__ = ()

    def __init__(
        self,
        out: EventBuffer,
        *,
        names: Collection[str] | None = None,
        unbracketed: bool = False,
    ) -> None:
        super().__init__(
            out, python_calls(out), first=python_calls(out, names), unbracketed=unbracketed
        )
