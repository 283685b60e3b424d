"""`lfm2_pythonic`: LFM2, LFM2-8B-A1B, LFM2.5 (Instruct and Thinking).

    <think>…</think>Checking.<|tool_call_start|>[get_weather(city='Paris'), now()]<|tool_call_end|>

The LFM2.5 templates write strings single-quoted and dict arguments with `tojson`, so
JSON literals (`true`, `null`) appear inside the pythonic calls.  llama.cpp's grammar
for LFM2 produces a JSON array of `{"name", "arguments"}` envelopes between the same
markers, so an item may be either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from responsekit.parsing.formats.pythonic import CallListParser
from responsekit.parsing.json_stream import JsonCallReader
from responsekit.parsing.pyliteral import CallItem, CallList, python_calls
from responsekit.parsing.registry import register

_START = "<|tool_call_start|>"
_END = "<|tool_call_end|>"


@register
class Lfm2PythonicParser(CallListParser):
    """`<think>` reasoning, content, then calls between the tool-call markers."""

    name = "lfm2_pythonic"
    stop_tokens = ("<|im_end|>", "<|endoftext|>", _END)
    call_markers = (_START,)
    call_closers: ClassVar[Mapping[str, str]] = {_START: _END}

    def _call_list(self, marker: str | None) -> CallList:
        out = self.out
        python = python_calls(out)

        def item(c: str) -> CallItem | None:
            return JsonCallReader(out) if c == "{" else python(c)

        return CallList(out, item, unbracketed=True)
