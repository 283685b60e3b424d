"""`xlam`: Salesforce xLAM-2 (fc-r).

    [{"name": "get_weather", "arguments": {"city": "Paris"}}, {…}]
    I'll call the tool.
    ```json
    [{"name": "get_time", "arguments": {"timezone": "UTC"}}]
    ```

There is no marker: a JSON array (or one envelope) opening the content, also after
`</think>`, or in a `json` code fence, is a call list when its first envelope is
`{"name": <declared tool>, "arguments": …}` and nothing else; otherwise it is text.
vLLM's xlam parser also accepts `[TOOL_CALLS]` and `<tool_call>…</tool_call>` wrappers,
which need no such check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from responsekit.parsing.formats.pythonic import CallListParser
from responsekit.parsing.json_stream import JsonCallReader
from responsekit.parsing.pyliteral import CallItem, CallList
from responsekit.parsing.registry import register

_FENCE = "```json"


@register
class XlamParser(CallListParser):
    """Optional `<think>` reasoning, content, and JSON call arrays bare, fenced or wrapped."""

    name = "xlam"
    stop_tokens = ("<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>")
    call_markers = (_FENCE, "[TOOL_CALLS]", "<tool_call>")
    call_closers: ClassVar[Mapping[str, str]] = {_FENCE: "```", "<tool_call>": "</tool_call>"}
    tentative_markers = frozenset((_FENCE,))
    bare_starts = "[{"

    def _call_list(self, marker: str | None) -> CallList:
        out = self.out
        names = self.schemas.names

        def item(c: str) -> CallItem | None:
            return JsonCallReader(out) if c == "{" else None

        def checked(c: str) -> CallItem | None:
            return JsonCallReader(out, names=names, strict=True) if c == "{" else None

        tentative = marker is None or marker in self.tentative_markers
        return CallList(out, item, first=checked if tentative else None, unbracketed=True)
