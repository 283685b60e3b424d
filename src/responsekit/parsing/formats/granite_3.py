"""`granite_3`: Granite 3.1/3.2/3.3.

    <think>Need the weather.</think><|tool_call|>[{"name": "get_weather", "arguments": {…}}]
    <think>I'm thinking</think><response>Hello</response>                         (3.3)
    Here is my thought process:⏎…⏎Here is my response:⏎…                           (3.2)

Calls are a JSON array after `<|tool_call|>`, with no closing marker.  3.3 wraps the
answer in `<response>` tags, which are dropped.  3.2 marks reasoning with plain
phrases (also spelled `Here's`), honoured only at the very start of the output, as
vLLM's granite reasoning parser does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.formats.mistral_json_array import CallArrayParser
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register

_WS = " \t\r\n"
_THOUGHT = tuple(f"Here{v} my thought process:" for v in (" is", "'s", "\u2019s"))
_RESPONSE = tuple(f"Here{v} my response:" for v in (" is", "'s", "\u2019s"))


@register
class Granite3Parser(CallArrayParser):
    """`<think>` or phrase-marked reasoning, content, then `<|tool_call|>[…]`."""

    name = "granite_3"
    stop_tokens = ("<|end_of_text|>", "<response>", "</response>")
    call_markers = ("<|tool_call|>",)

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._lead: list[str] = []  # the start of the output while it may be a phrase
        self._thought_scan = MarkerScanner((*_RESPONSE, *self.stop_tokens))

    def _content_start(self, text: str, pos: int) -> int:
        self.handler = self._opening if not self._said_reasoning else self._content
        return pos

    def _opening(self, text: str, pos: int) -> int:
        """Before any content: `Here is my thought process:` opens 3.2 reasoning."""
        lead = self._lead
        n = len(text)
        while pos < n:
            c = text[pos]
            if lead or c not in _WS:
                lead.append(c)
                head = "".join(lead)
                if head in _THOUGHT:
                    lead.clear()
                    self.handler = self._thought
                    return pos + 1
                if not any(phrase.startswith(head) for phrase in _THOUGHT):
                    lead.pop()
                    self.handler = self._content
                    self._replay("".join(lead))
                    lead.clear()
                    return pos
            pos += 1
        return pos

    def _thought(self, text: str, pos: int) -> int:
        plain, marker, pos = self._thought_scan.scan(text, pos)
        self.out.reasoning(plain)
        if marker in _RESPONSE:
            self.handler = self._content
        return pos

    def _finish_call(self) -> None:
        if self.handler == self._opening:
            self.out.text("".join(self._lead))
        elif self.handler == self._thought:
            self.out.reasoning(self._thought_scan.flush())
        else:
            super()._finish_call()
