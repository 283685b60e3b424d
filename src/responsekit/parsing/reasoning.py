"""Reasoning output modes, as llama.cpp's `--reasoning-format` offers them.

`separate` keeps ReasoningDelta events (rendered as `reasoning_content` / reasoning
items); `inline` turns them into content wrapped in `<think>…</think>`, as the
DeepSeek API's older clients expect; `none` drops them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

from responsekit.canonical.events import Event, ReasoningDelta, TextDelta

ReasoningMode: TypeAlias = Literal["separate", "inline", "none"]

_OPEN = "<think>\n"
_CLOSE = "\n</think>\n\n"


class ReasoningFilter:
    """Applies a `ReasoningMode` to an event stream, one batch at a time."""

    __slots__ = ("_open", "mode")

    def __init__(self, mode: ReasoningMode = "separate") -> None:
        if mode not in ("separate", "inline", "none"):
            raise ValueError(f"unknown reasoning mode {mode!r}; use separate, inline or none")
        self.mode = mode
        self._open = False  # inline: a `<think>` was emitted and not closed yet

    def __call__(self, events: Iterable[Event]) -> list[Event]:
        """Filter one batch (e.g. what a parser's `feed()` returned)."""
        if self.mode == "separate":
            return list(events)
        out: list[Event] = []
        for event in events:
            if isinstance(event, ReasoningDelta):
                if self.mode == "inline":
                    out.append(TextDelta(event.text if self._open else _OPEN + event.text))
                    self._open = True
                continue
            if self._open:
                out.append(TextDelta(_CLOSE))
                self._open = False
            out.append(event)
        return out

    def finish(self) -> list[Event]:
        """End of stream: close an inline reasoning block still open."""
        if self._open:
            self._open = False
            return [TextDelta(_CLOSE)]
        return []
