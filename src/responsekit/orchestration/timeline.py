"""When each of a response's events went out, kept with the stored response for the inspector.

Every event but the deltas is an entry with its time; a run of deltas of one kind on one item is
one entry with its count and the times of its first and last delta (a streamed answer is mostly
deltas: a few dozen entries stand for thousands of events). The time to first token is the first
delta's. Times are seconds since the request arrived (as the metrics count the time to first
token), so a slow body, history read or engine connection shows as the gap before the first event. Noting an event is a clock read and a
comparison; the whole is written with the response, in the same statement.
"""

from __future__ import annotations

import time
from typing import Any

from ..operations.logs import request_arrived
from .runs import TERMINAL


class Timeline:
    __slots__ = ("_run", "_start", "duration", "entries", "first_token", "started_at")

    def __init__(self) -> None:
        now = time.perf_counter()
        self._start = request_arrived() or now
        self.started_at = time.time() - (now - self._start)
        """The wall-clock time of the request's arrival."""
        self.entries: list[dict[str, Any]] = []
        self._run: dict[str, Any] | None = None
        """The entry of the delta run under way."""
        self.first_token: float | None = None
        self.duration: float | None = None

    def saw(self, event: dict[str, Any]) -> None:
        at = time.perf_counter() - self._start
        kind: str = event["type"]
        if kind.endswith(".delta"):
            run = self._run
            if run is not None and run["type"] == kind and run["output_index"] == event.get("output_index"):
                run["count"] += 1
                run["until"] = at
                return
            if self.first_token is None:
                self.first_token = at
            self._run = {"t": at, "type": kind, "output_index": event.get("output_index"), "count": 1, "until": at}
            self.entries.append(self._run)
            return
        self._run = None
        entry: dict[str, Any] = {"t": at, "type": kind, "sequence_number": event.get("sequence_number")}
        if "output_index" in event:
            entry["output_index"] = event["output_index"]
        item = event.get("item")
        if isinstance(item, dict):
            entry["item"] = {"type": item.get("type"), "id": item.get("id"), "status": item.get("status")}
        response = event.get("response")
        if isinstance(response, dict):
            entry["status"] = response.get("status")
        if kind == "error":
            entry["message"] = event.get("message")
        self.entries.append(entry)
        if kind in TERMINAL:
            self.duration = at

    def elapsed(self) -> float:
        """Seconds since the request arrived (the inspector's live page counts from there too)."""
        return time.perf_counter() - self._start

    def record(self) -> dict[str, Any]:
        """What is stored: the entries, when the response started, its time to first token and duration
        (in seconds, to the tenth of a millisecond)."""
        for entry in self.entries:
            entry["t"] = round(entry["t"], 4)
            if "until" in entry:
                entry["until"] = round(entry["until"], 4)
        return {
            "started_at": self.started_at,
            "time_to_first_token": None if self.first_token is None else round(self.first_token, 4),
            "duration": None if self.duration is None else round(self.duration, 4),
            "entries": self.entries,
        }
