"""Stop texts found in streamed text: the in-process engine's stop texts (its template's end
markers and a request's `stop`) and the Messages API's `stop_sequences`, which it must name
when one ends the answer."""

from __future__ import annotations

__all__ = ["StopTexts"]


class StopTexts:
    """Finds the first stop text in a stream of pieces, holding back what may be the start of one."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = [stop for stop in stops if stop]
        self._pending = ""
        self.hit: str | None = None
        """The stop text that ended the stream, once one did."""

    def feed(self, text: str) -> str:
        """The text that is surely before any stop; after a stop, nothing."""
        if self.hit is not None:
            return ""
        if not self._stops:
            return text
        pending = self._pending + text
        found = [(position, stop) for stop in self._stops if (position := pending.find(stop)) >= 0]
        if found:
            position, self.hit = min(found, key=lambda pair: pair[0])
            self._pending = ""
            return pending[:position]
        hold = max((k for stop in self._stops for k in range(1, len(stop)) if pending.endswith(stop[:k])), default=0)
        self._pending = pending[len(pending) - hold :] if hold else ""
        return pending[: len(pending) - hold]

    def flush(self) -> str:
        """What was held back, at the end of the stream (nothing after a stop)."""
        pending, self._pending = self._pending, ""
        return "" if self.hit is not None else pending
