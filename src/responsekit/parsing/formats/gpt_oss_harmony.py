"""`gpt_oss_harmony`: gpt-oss-20b/120b (OpenAI harmony messages).

    <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}
    <|call|>

Each message is a header (role, channel, recipient, constraint) and a body.  The
analysis channel is reasoning; final and recipient-less commentary (a preamble) are
content; a `to=` recipient on any channel, in the role header or the channel header,
makes the body a tool call's JSON arguments.  `<|call|>`, `<|return|>` and
`<|endoftext|>` end a message and never show.

The generation prompt `<|start|>assistant` leaves the first role header open, so the
answer may begin with its recipient, as gpt-oss's own template writes a call:

    to=functions.NAME<|channel|>commentary json<|message|>{…}<|call|>
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from responsekit.parsing.base import StreamParser
from responsekit.parsing.emit import ARGS, REASONING, TEXT
from responsekit.parsing.json_stream import STRING_STOPS, JsonValueStreamer, string_split
from responsekit.parsing.markers import MarkerScanner
from responsekit.parsing.registry import register

_START = "<|start|>"
_CHANNEL = "<|channel|>"
_MESSAGE = "<|message|>"
_ENDS = ("<|end|>", "<|call|>", "<|return|>", "<|endoftext|>")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_LEADING_RECIPIENT = re.compile(r"\s*to=[^\s<]")
_LEAD_LIMIT = 256
"""Longest opening text held back as a possible recipient (a header is short)."""


@register
class GptOssHarmonyParser(StreamParser):
    """Harmony messages → reasoning, content and (one per generation) tool calls."""

    name = "gpt_oss_harmony"

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self._header_scan = MarkerScanner((_MESSAGE, *_ENDS))
        self._body_scan = MarkerScanner((*_ENDS, _START, _CHANNEL))
        # `<|message|>` is found between messages only to end a recipient that opens
        # the answer (`_opening`); elsewhere there it is text.
        self._between_scan = MarkerScanner((_START, _CHANNEL, _MESSAGE, *_ENDS))
        self._header: list[str] = []
        self._lead = ""
        self._channel = REASONING
        self._json = JsonValueStreamer()
        if thinking_open:
            self.handler = self._body
        else:
            self.handler = self._opening

    @classmethod
    def thinking_open_in(cls, prompt: str) -> bool:
        return prompt.rstrip().endswith(_CHANNEL + "analysis" + _MESSAGE)

    def _opening(self, text: str, pos: int) -> int:
        """The answer's start, still inside the role header the generation prompt opened:
        a leading ` to=RECIPIENT` is held until a marker shows what it is."""
        plain, marker, pos = self._between_scan.scan(text, pos)
        lead = self._lead = self._lead + plain
        if marker is None:
            if not _may_be_recipient(lead):
                self.out.text(lead)
                self.handler = self._between
            return pos
        if _may_be_recipient(lead) and _LEADING_RECIPIENT.match(lead):
            if marker == _CHANNEL:
                self._open_header(lead + _CHANNEL)
            elif marker == _MESSAGE:
                self._open_body(lead)
            else:  # a header with no body
                self._between_marker(marker)
            return pos
        self.out.text(lead)
        self._between_marker(marker)
        return pos

    def _between(self, text: str, pos: int) -> int:
        """Outside a message: text here has no header, so it is shown as content."""
        plain, marker, pos = self._between_scan.scan(text, pos)
        self.out.text(plain)
        self._between_marker(marker)
        return pos

    def _between_marker(self, marker: str | None) -> None:
        self.handler = self._between
        if marker == _START:
            self._open_header("")
        elif marker == _CHANNEL:
            self._open_header(_CHANNEL)
        elif marker == _MESSAGE:
            self.out.text(_MESSAGE)

    def _open_header(self, seed: str) -> None:
        self._header.clear()
        self._header.append(seed)
        self.handler = self._header_text

    def _header_text(self, text: str, pos: int) -> int:
        plain, marker, pos = self._header_scan.scan(text, pos)
        self._header.append(plain)
        if marker == _MESSAGE:
            self._open_body("".join(self._header))
        elif marker:  # a message with no body
            self.handler = self._between
        return pos

    def _open_body(self, header: str) -> None:
        recipient = _RECIPIENT.search(header)
        if recipient:
            name = recipient.group(1).removeprefix("functions.")
            self.out.start_call(name)
            self._json = JsonValueStreamer()
            self.handler = self._arguments
            return
        channel = _CHANNEL_NAME.search(header)
        self._channel = REASONING if channel and channel.group(1) == "analysis" else TEXT
        self.handler = self._body

    def _body(self, text: str, pos: int) -> int:
        scan = self._body_scan
        plain, marker, pos = scan.scan(text, pos)
        if self._channel == REASONING:
            self.out.reasoning(plain)
        else:
            self.out.text(plain)
        if marker is None:
            if scan.resting:
                self.fast_lane(self._channel, scan.starts, scan.split)
        elif marker == _START:  # `<|end|>` left out
            self._open_header("")
        elif marker == _CHANNEL:
            self._open_header(_CHANNEL)
        elif marker:
            self.handler = self._between
        return pos

    def _arguments(self, text: str, pos: int) -> int:
        emitted, pos = self._json.feed(text, pos)
        self.out.args(emitted)
        if self._json.in_string:
            self.fast_lane(ARGS, STRING_STOPS, string_split)
        elif self._json.done or self._json.failed:
            self.out.args(self._json.close())
            self.out.end_call()
            self.handler = self._call_tail
        return pos

    def _call_tail(self, text: str, pos: int) -> int:
        """After the arguments, up to the end of the message."""
        _, marker, pos = self._body_scan.scan(text, pos)
        if marker == _START:
            self._open_header("")
        elif marker == _CHANNEL:
            self._open_header(_CHANNEL)
        elif marker:
            self.handler = self._between
        return pos

    def _finish(self) -> None:
        if self.handler == self._arguments:
            self.out.args(self._json.close())
        elif self.handler == self._body:
            held = self._body_scan.flush()
            if self._channel == REASONING:
                self.out.reasoning(held)
            else:
                self.out.text(held)
        elif self.handler == self._between:
            self.out.text(self._between_scan.flush())
        elif self.handler == self._opening:
            self.out.text(self._lead + self._between_scan.flush())


def _may_be_recipient(lead: str) -> bool:
    """Whether the answer's opening text can still become ` to=RECIPIENT` (once it
    cannot, no longer text can: the answer's split never changes the decision)."""
    if len(lead) > _LEAD_LIMIT:
        return False
    rest = lead.lstrip()
    return "to=".startswith(rest) or (rest.startswith("to=") and "\n" not in rest)
