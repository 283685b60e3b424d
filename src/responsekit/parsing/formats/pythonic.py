"""`pythonic`: the whole output is a list of Python calls (Llama-3.2 pythonic template,
ToolACE, Gemma 3 prompted for `[func(param=value)]`).

    [get_weather(city="Paris", days=-3), get_time()]
    ```tool_code
    [get_weather(city="Paris")]
    ```

Gemma 3 often wraps the list in a `tool_code` fence (docs/parsing.md, *The formats*).  A list
or a fence is a call list only if its first call names a declared tool (Gemma's own
examples show `print(f(…))` in a fence); otherwise it stays text.

Also home of `CallListParser`, shared by the formats whose calls are a list read with
`pyliteral.CallList` (pythonic and JSON items alike): Llama 4, LFM2, Olmo 3, xLAM,
Phi-4-mini, Apertus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from responsekit.parsing.base import Handler
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.pyliteral import CallList, PythonCallList
from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser

_WS = " \t\r\n"


class CallListParser(TaggedParser):
    """Content, then a list of calls after a marker, or (tentatively) with none.

    Subclasses implement `_call_list(marker)` and declare `call_closers`: the text that
    closes a marker's call region, expected after the list (when something else comes,
    the model moved on and it is content again; a broken list drops the region up to
    it, or without a closer ends there).  A marker in `tentative_markers`, and a list
    that opens the content with a character of `bare_starts` (only when tools are
    declared), may be ordinary text: it is held until a call starts and given back as
    text when none does.
    """

    call_closers: ClassVar[Mapping[str, str]] = {}
    tentative_markers: ClassVar[frozenset[str]] = frozenset()
    bare_starts: ClassVar[str] = ""

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._list = CallList(self.out, lambda c: None)
        self._closer = ""
        self._matched = 0  # characters of the closer seen after the list
        self._raw: list[str] | None = None  # tentative: the text read, given back if no call
        self._marker = ""  # the tentative marker that opened the list ("" for a bare list)
        self._region_scans = {c: MarkerScanner((c,)) for c in set(self.call_closers.values())}

    def _call_list(self, marker: str | None) -> CallList:
        """The list reader after `marker` (None: a bare list opening the content)."""
        raise NotImplementedError

    def _call_handler(self, marker: str) -> Handler:
        tentative = marker in self.tentative_markers
        self._marker = marker if tentative else ""
        return self._open(marker, self.call_closers.get(marker, ""), [] if tentative else None)

    def _open(self, marker: str | None, closer: str, raw: list[str] | None) -> Handler:
        self._list = self._call_list(marker)
        self._closer = closer
        self._raw = raw
        return self._calls

    def _content_start(self, text: str, pos: int) -> int:
        n = len(text)
        while pos < n and text[pos] in _WS:
            pos += 1
        if pos == n:
            return pos
        self._resume = self._content
        if text[pos] in self.bare_starts and self.schemas.names:
            self._marker = ""
            self.handler = self._open(None, "", [])
        else:
            self.handler = self._content
        return pos

    def _calls(self, text: str, pos: int) -> int:
        calls = self._list
        start = pos
        pos = calls.feed(text, pos)
        raw = self._raw
        if raw is not None:
            if not calls.started:
                raw.append(text[start:pos])
                if calls.done or calls.failed:
                    self._give_back(raw)
                return pos
            self._raw = None
        if calls.done:
            self._matched = 0
            self.handler = self._closing if self._closer else self._resume
        elif calls.failed:
            calls.close()
            self.handler = self._skip_region if self._closer else self._resume
        return pos

    def _give_back(self, raw: list[str]) -> None:
        """A tentative list with no call: what was read is text after all.

        The marker is text as it is; the rest goes back through the scanner, which may
        find a marker in it (xLAM's `[TOOL_CALLS]` starts like a bare list).
        """
        self._raw = None
        self.resume()
        if self._marker:
            if self.handler == self._reasoning:
                self.out.reasoning(self._marker)
            else:
                self.out.text(self._marker)
                self._said_content = True
        self._replay("".join(raw))

    def _closing(self, text: str, pos: int) -> int:
        """After the list: the closer, else the model moved on (a held part goes back)."""
        closer = self._closer
        n = len(text)
        while pos < n:
            c = text[pos]
            if self._matched == 0 and c in _WS:
                pos += 1
            elif c == closer[self._matched]:
                pos += 1
                self._matched += 1
                if self._matched == len(closer):
                    self.resume()
                    return pos
            else:
                self.resume()
                self._replay(closer[: self._matched])
                return pos
        return pos

    def _skip_region(self, text: str, pos: int) -> int:
        """A broken list: drop the rest of the call region."""
        _, marker, pos = self._region_scans[self._closer].scan(text, pos)
        if marker:
            self.resume()
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._calls:
            if self._raw is not None:
                self._give_back(self._raw)
            else:
                self._list.close()


@register
class PythonicParser(CallListParser):
    """A bare `[call, …]` opening the output, or a `tool_code` fence anywhere; no reasoning."""

    name = "pythonic"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<eos>")
    call_markers = ("```tool_code",)
    call_closers: ClassVar[Mapping[str, str]] = {"```tool_code": "```"}
    tentative_markers = frozenset(call_markers)
    bare_starts = "["

    def _call_list(self, marker: str | None) -> CallList:
        unbracketed = marker is not None  # the fence may hold bare calls
        return PythonCallList(self.out, names=self.schemas.names, unbracketed=unbracketed)
