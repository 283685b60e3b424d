"""`llama4_pythonic`: Llama 4 Scout/Maverick.

    [get_weather(city="Paris"), get_weather(city="Tokyo", unit="celsius")]
    <|python_start|>[get_time(timezone="UTC")]<|python_end|>

Values are Python literals (`True`, `None`, `-3`, dicts), converted to JSON as they
stream (`pyliteral`).  A bare list must open the output and name a declared tool in
its first call, else it is text; between the markers the brackets may be left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from responsekit.parsing.formats.pythonic import CallListParser
from responsekit.parsing.pyliteral import CallList, PythonCallList
from responsekit.parsing.registry import register

_START = "<|python_start|>"
_END = "<|python_end|>"


@register
class Llama4PythonicParser(CallListParser):
    """Content, and calls as a bare list or between `<|python_start|>` markers; no reasoning."""

    name = "llama4_pythonic"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<|eot|>", "<|eom|>", "<|end_of_text|>", _END)
    call_markers = (_START,)
    call_closers: ClassVar[Mapping[str, str]] = {_START: _END}
    bare_starts = "["

    def _call_list(self, marker: str | None) -> CallList:
        if marker is None:
            return PythonCallList(self.out, names=self.schemas.names)
        return PythonCallList(self.out, unbracketed=True)
