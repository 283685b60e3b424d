"""`olmo3_pythonic`: Olmo 3 Instruct / Think.

    <think>…</think><function_calls>
    get_weather(city="Paris")
    get_time(timezone="UTC")
    </function_calls>

One pythonic call per line, no list brackets (brackets are accepted too).  The Think
templates open `<think>` in the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from responsekit.parsing.formats.pythonic import CallListParser
from responsekit.parsing.pyliteral import CallList, PythonCallList
from responsekit.parsing.registry import register

_START = "<function_calls>"
_END = "</function_calls>"


@register
class Olmo3PythonicParser(CallListParser):
    """`<think>` reasoning, content, then pythonic calls in `<function_calls>`."""

    name = "olmo3_pythonic"
    stop_tokens = ("<|im_end|>", "<|endoftext|>", _END)
    call_markers = (_START,)
    call_closers: ClassVar[Mapping[str, str]] = {_START: _END}

    def _call_list(self, marker: str | None) -> CallList:
        return PythonCallList(self.out, unbracketed=True)
