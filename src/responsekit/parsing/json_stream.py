"""Incremental JSON scanning for argument text that *is* JSON.

`JsonValueStreamer` reads one JSON value character by character, tracking strings,
escapes and nesting, so a `</tool_call>` or `}` inside a string never ends the value.
It re-emits the text it read, but only up to the last *healable* point: emitted text
plus `close()` is always valid JSON.  Concretely it withholds a partial key, a `,` or
`:` not yet followed by a value, a number that may still grow and a partial literal or
escape, while a string value streams as it arrives (§5 of the formats catalogue).  The
concatenated output is the model's own text of the value (raw control characters in
strings are escaped), so argument deltas always join to the final arguments.

`JsonStringArgs` handles arguments double-encoded as a JSON string, and
`JsonCallReader` reads a call envelope such as `{"name": …, "arguments": {…}}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from responsekit.parsing.emit import EventBuffer

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = frozenset("-+.eE0123456789")
_WS = frozenset(" \t\r\n")
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = frozenset('"\\/bfnrt')
STRING_STOPS = frozenset('"\\' + "".join(map(chr, range(32))))
"""Inside a string value, text without these characters is copied through unchanged."""
_STRING_RUN = re.compile(
    r'([^"\\\x00-\x1f]*(?:(?:\\["\\/bfnrt]|\\u(?![dD][89abAB])[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*)'
    r"(\\(?:u[0-9a-fA-F]{0,3})?)?"
).fullmatch


def string_split(text: str) -> tuple[str, str] | None:
    """A fast lane's split inside a string value: plain characters and complete escapes
    are copied through unchanged, and an escape cut at the end is held back; None for
    anything else (the closing quote, a high surrogate, which the streamer holds until
    its pair, raw control characters)."""
    run = _STRING_RUN(text)
    return None if run is None else (run[1], run[2] or "")


# Scanner modes.
_VALUE = 0  # a value must start here
_FIRST = 1  # after '[': a value or ']'
_KEY_FIRST = 2  # after '{': a key or '}'
_KEY = 3  # after ',' in an object: a key
_STR = 4
_ESC = 5
_UNI = 6
_COLON = 7
_NUM = 8
_LIT = 9
_AFTER = 10  # after a value inside a container: ',' or the closer
_DONE = 11
_FAIL = 12


class JsonValueStreamer:
    """Reads one JSON value from a stream and re-emits it as a healable prefix."""

    __slots__ = ("_hex", "_high", "_key", "_lit", "_mode", "_num", "_open_str", "_pend", "_stack")

    def __init__(self) -> None:
        self._mode = _VALUE
        self._stack: list[str] = []
        self._pend: list[str] = []
        self._key = False
        self._lit = ""
        self._hex = 0
        self._high = False  # the last escape was a high surrogate awaiting its pair
        self._num: list[str] = []
        self._open_str = False  # the emitted text ends inside a string value

    @property
    def done(self) -> bool:
        """The value is complete."""
        return self._mode == _DONE

    @property
    def failed(self) -> bool:
        """The text is not JSON; scanning stopped at the offending character."""
        return self._mode == _FAIL

    @property
    def in_string(self) -> bool:
        """Inside a string value with nothing held: text free of `STRING_STOPS` would be
        emitted as it is and leave the state unchanged."""
        return self._mode == _STR and not self._key and not self._high

    def feed(self, text: str, pos: int = 0) -> tuple[str, int]:
        """Scan `text[pos:]`; return the newly emittable text and where scanning stopped.

        Scanning stops right after the value's last character, or at the character that
        made the text invalid; otherwise all of the text is consumed.
        """
        mode = self._mode
        if mode >= _DONE:
            return "", pos
        out: list[str] = []
        pend = self._pend
        stack = self._stack
        n = len(text)
        i = pos
        while i < n:
            if mode == _STR:
                j = i
                while j < n:
                    c = text[j]
                    if c == '"' or c == "\\" or c < " ":
                        break
                    j += 1
                if j > i:
                    if self._high:
                        self._high = False
                        out.extend(pend)
                        pend.clear()
                    (pend if self._key else out).append(text[i:j])
                    i = j
                    if i == n:
                        break
                c = text[i]
                i += 1
                if c == '"':
                    if self._key:
                        pend.append(c)
                        mode = _COLON
                    else:
                        out.extend(pend)
                        pend.clear()
                        out.append(c)
                        self._open_str = False
                        self._high = False
                        mode = self._after_value()
                        if mode == _DONE:
                            break
                elif c == "\\":
                    if not self._key and not self._high:
                        out.extend(pend)
                        pend.clear()
                    pend.append(c)
                    mode = _ESC
                else:  # a raw control character: keep the JSON valid by escaping it
                    (pend if self._key else out).append(json.dumps(c)[1:-1])
                continue
            c = text[i]
            if mode == _ESC:
                i += 1
                pend.append(c)
                if c == "u":
                    self._hex = 0
                    mode = _UNI
                elif c in _SIMPLE_ESCAPES:
                    mode = _STR
                    if not self._key:
                        self._high = False
                        out.extend(pend)
                        pend.clear()
                else:
                    mode = _FAIL
                    i -= 1
                    pend.pop()
                    break
                continue
            if mode == _UNI:
                if c not in _HEX:
                    mode = _FAIL
                    break
                i += 1
                pend.append(c)
                self._hex += 1
                if self._hex == 4:
                    mode = _STR
                    if not self._key:
                        code = int("".join(pend[-4:]), 16)
                        self._high = 0xD800 <= code < 0xDC00
                        if not self._high:
                            out.extend(pend)
                            pend.clear()
                continue
            if mode == _NUM:
                if c in _NUMBER_CHARS:
                    self._num.append(c)
                    i += 1
                    continue
                mode = self._end_number(out)
                if mode >= _DONE:
                    break
                continue
            if mode == _LIT:
                if c != self._lit[0]:
                    mode = _FAIL
                    break
                i += 1
                pend.append(c)
                self._lit = self._lit[1:]
                if not self._lit:
                    out.extend(pend)
                    pend.clear()
                    mode = self._after_value()
                    if mode == _DONE:
                        break
                continue
            if c in _WS:
                i += 1
                if stack:
                    pend.append(c)
                continue
            if mode <= _FIRST:
                if c == '"':
                    out.extend(pend)
                    pend.clear()
                    out.append(c)
                    self._key = False
                    self._open_str = True
                    mode = _STR
                elif c == "{" or c == "[":
                    out.extend(pend)
                    pend.clear()
                    out.append(c)
                    stack.append("}" if c == "{" else "]")
                    mode = _KEY_FIRST if c == "{" else _FIRST
                elif c in _LITERALS:
                    pend.append(c)
                    self._lit = _LITERALS[c]
                    mode = _LIT
                elif c in _NUMBER_CHARS:
                    self._num = [c]
                    mode = _NUM
                elif c == "]" and stack and stack[-1] == "]":  # also after a trailing comma
                    mode = self._close(out, c)
                else:
                    mode = _FAIL
                    break
                i += 1
                if mode == _DONE:
                    break
                continue
            if mode <= _KEY:
                i += 1
                if c == '"':
                    pend.append(c)
                    self._key = True
                    mode = _STR
                elif c == "}":  # also tolerates a trailing comma
                    mode = self._close(out, c)
                    if mode == _DONE:
                        break
                else:
                    mode = _FAIL
                    i -= 1
                    break
                continue
            if mode == _COLON:
                if c != ":":
                    mode = _FAIL
                    break
                i += 1
                pend.append(c)
                mode = _VALUE
                continue
            # _AFTER
            i += 1
            if c == ",":
                pend.append(c)
                mode = _KEY if stack[-1] == "}" else _VALUE
            elif c == stack[-1]:
                mode = self._close(out, c)
                if mode == _DONE:
                    break
            else:
                mode = _FAIL
                i -= 1
                break
        self._mode = mode
        return "".join(out), i

    def close(self, default: str = "{}") -> str:
        """Text that turns everything emitted so far into valid JSON (end of stream).

        A top-level number still being read is completed first; `default` stands in
        for a value that never started.
        """
        if self._mode == _NUM and not self._stack:
            out: list[str] = []
            self._end_number(out)
            return "".join(out) if self._mode == _DONE else default
        if self._mode == _DONE:
            return ""
        if not self._stack and not self._open_str:
            return default
        closers = '"' if self._open_str else ""
        self._mode = _DONE
        return closers + "".join(reversed(self._stack))

    def _after_value(self) -> int:
        return _AFTER if self._stack else _DONE

    def _end_number(self, out: list[str]) -> int:
        number = "".join(self._num)
        if not _NUMBER.fullmatch(number):
            self._mode = _FAIL
            return _FAIL
        out.extend(self._pend)
        self._pend.clear()
        out.append(number)
        self._mode = self._after_value()
        return self._mode

    def _close(self, out: list[str], closer: str) -> int:
        stack = self._stack
        if not stack or stack[-1] != closer:
            return _FAIL
        # Whatever is pending is whitespace or a dangling comma: drop it.
        self._pend.clear()
        stack.pop()
        out.append(closer)
        return self._after_value()


class JsonStringArgs:
    """Arguments double-encoded as a JSON string (`"arguments": "{\\"a\\": 1}"`).

    Decodes the string as it streams and feeds the decoded text to an inner
    `JsonValueStreamer`, so the emitted arguments are the decoded JSON object.  The
    string is always read to its closing quote; if its content is not JSON, the
    arguments are completed as emitted so far (`{}` at worst).
    """

    __slots__ = ("_hex", "_high", "_inner", "_mode", "_state")

    def __init__(self) -> None:
        self._inner = JsonValueStreamer()
        self._state = 0  # 0: before the opening quote, 1: in string, 2: escape, 3: \\u
        self._hex: list[str] = []
        self._high = ""  # a decoded high surrogate waiting for its pair
        self._mode = 0  # 0 running, 1 done, 2 failed

    @property
    def done(self) -> bool:
        """The encoded string is complete."""
        return self._mode == 1

    @property
    def failed(self) -> bool:
        """The value is not a string."""
        return self._mode == 2

    def feed(self, text: str, pos: int = 0) -> tuple[str, int]:
        """Same contract as `JsonValueStreamer.feed`."""
        decoded: list[str] = []
        i, n = pos, len(text)
        while i < n and self._mode == 0:
            c = text[i]
            i += 1
            state = self._state
            if state == 1:
                if c == '"':
                    self._mode = 1
                elif c == "\\":
                    self._state = 2
                else:
                    decoded.append(c)
            elif state == 2:
                if c == "u":
                    self._state = 3
                    self._hex.clear()
                else:
                    decoded.append(json.loads(f'"\\{c}"') if c in _SIMPLE_ESCAPES else c)
                    self._state = 1
            elif state == 3:
                self._hex.append(c)
                if len(self._hex) == 4:
                    self._state = 1
                    code = int("".join(self._hex), 16) if _HEX.issuperset(self._hex) else 0xFFFD
                    if 0xD800 <= code < 0xDC00:
                        self._high = chr(code)
                        continue
                    if self._high and 0xDC00 <= code < 0xE000:
                        pair = (self._high + chr(code)).encode("utf-16", "surrogatepass")
                        decoded.append(pair.decode("utf-16"))
                    else:
                        decoded.append(chr(code))
                    self._high = ""
            elif c == '"':
                self._state = 1
            elif c not in _WS:
                self._mode = 2
                i -= 1
        emitted, _ = self._inner.feed("".join(decoded))
        if self._mode == 1 and not self._inner.done:
            emitted += self._inner.close()
        return emitted, i

    def close(self, default: str = "{}") -> str:
        """Same contract as `JsonValueStreamer.close`."""
        return self._inner.close(default)


class JsonCallReader:
    """Reads one call envelope object, e.g. `{"name": "f", "arguments": {…}}`.

    Emits through `out`: the call starts once the name string is complete, and the
    arguments stream as they arrive (held until the name is known if they come
    first).  Other members are scanned and ignored.  With `names` given, an envelope
    whose name is not among them is *rejected* (see `rejected`) and nothing is emitted,
    so a bare JSON answer that merely has a "name" key stays content; with `strict`,
    so is an envelope with any other member before the call starts.  Once it has
    started, other members are ignored: an emitted call cannot be taken back.
    """

    __slots__ = (
        "_args_keys",
        "_capture",
        "_held",
        "_id_keys",
        "_key",
        "_name_keys",
        "_names",
        "_out",
        "_role",
        "_seen_args",
        "_state",
        "_strict",
        "_value",
        "call_id",
        "done",
        "failed",
        "name",
        "rejected",
        "started",
    )

    def __init__(
        self,
        out: EventBuffer,
        *,
        name_keys: Collection[str] = ("name",),
        args_keys: Collection[str] = ("arguments", "parameters"),
        id_keys: Collection[str] = ("id",),
        names: Collection[str] | None = None,
        strict: bool = False,
    ) -> None:
        self._out = out
        self._name_keys = name_keys
        self._args_keys = args_keys
        self._id_keys = id_keys
        self._names = names
        self._strict = strict
        self._state = 0  # 0 before '{', 1 key, 2 colon, 3 value, 4 after value
        self._key = JsonValueStreamer()
        self._value: JsonValueStreamer | JsonStringArgs | None = None
        self._role = ""
        self._capture: list[str] = []
        self._held: list[str] = []
        self.name: str | None = None
        self.call_id: str | None = None
        self.done = False
        self.failed = False
        self.rejected = False
        self.started = False  # the call start was emitted
        self._seen_args = False

    def feed(self, text: str, pos: int = 0) -> int:
        """Consume `text[pos:]` until the envelope ends or fails; return the position."""
        n = len(text)
        i = pos
        while i < n and not (self.done or self.failed or self.rejected):
            state = self._state
            if state == 3:
                i = self._feed_value(text, i)
                continue
            if state == 1 and self._capture:  # inside a key split across deltas
                i = self._feed_key(text, i)
                continue
            c = text[i]
            if c in _WS:
                i += 1
                continue
            if state == 0:
                if c != "{":
                    self.failed = True
                    break
                self._state = 1
                i += 1
            elif state == 1:
                if c == "}":
                    self._end()
                    i += 1
                    break
                if c == ",":
                    i += 1
                    continue
                if c != '"':
                    self.failed = True
                    break
                i = self._feed_key(text, i)
            elif state == 2:
                if c != ":":
                    self.failed = True
                    break
                i += 1
                key = json.loads("".join(self._capture))
                self._capture.clear()
                self._key = JsonValueStreamer()
                self._role = (
                    "name"
                    if key in self._name_keys and not self.started  # a repeated name is ignored
                    else "args"
                    if key in self._args_keys
                    else "id"
                    if key in self._id_keys
                    else ""
                )
                self._value = None
                self._state = 3
                if self._strict and not self._role and not self.started:
                    self.rejected = True
            else:  # 4: after a member
                if c == ",":
                    self._state = 1
                    i += 1
                elif c == "}":
                    self._end()
                    i += 1
                else:
                    self.failed = True
        return i

    @property
    def in_arguments_string(self) -> bool:
        """Inside a string of the emitted arguments (see `JsonValueStreamer.in_string`)."""
        value = self._value
        return (
            self.started
            and self._state == 3
            and self._role == "args"
            and isinstance(value, JsonValueStreamer)
            and value.in_string
        )

    def close(self) -> None:
        """End of stream inside the envelope: complete what was emitted."""
        if self.started and self._value is not None and self._role == "args" and self._state == 3:
            self._out.args(self._value.close())
        if self.started and not self._seen_args:
            self._out.args("{}")

    def _feed_key(self, text: str, i: int) -> int:
        emitted, i = self._key.feed(text, i)
        self._capture.append(emitted)
        if self._key.failed:
            self.failed = True
        elif self._key.done:
            self._state = 2
        return i

    def _feed_value(self, text: str, i: int) -> int:
        value = self._value
        if value is None:
            while i < len(text) and text[i] in _WS:
                i += 1
            if i == len(text):
                return i
            if self._role == "args" and text[i] == '"':
                value = JsonStringArgs()
            else:
                value = JsonValueStreamer()
            self._value = value
            if self._role == "args":
                self._seen_args = True
        emitted, i = value.feed(text, i)
        role = self._role
        if role == "args":
            if self.started:
                self._out.args(emitted)
            else:
                self._held.append(emitted)
        elif role:
            self._capture.append(emitted)
        if value.failed:
            self.failed = True
        elif value.done:
            self._state = 4
            if role == "name" or role == "id":
                decoded = json.loads("".join(self._capture))
                self._capture.clear()
                if isinstance(decoded, str):
                    if role == "name":
                        self._set_name(decoded)
                    else:
                        self.call_id = decoded
        return i

    def _set_name(self, name: str) -> None:
        self.name = name
        if self._names is not None and name not in self._names:
            self.rejected = True
            return
        self._out.start_call(name, self.call_id)
        self.started = True
        self._out.args("".join(self._held))
        self._held.clear()

    def _end(self) -> None:
        self.done = True
        if self.started and not self._seen_args:
            self._out.args("{}")
