"""Foreground responses in flight in this process, for the inspector.

A foreground response (streamed or not, over HTTP or a WebSocket) is stored only at its end, in
one transaction: nothing half-written is ever in the store, and `GET /v1/responses/{id}` knows
it only once it is whole. While it runs, the inspector finds it here instead: each process
lists its own flights (per replica, not shared through the database). Taking off and landing
are a dict insert and removal; each event goes to the timeline as before, and to a watcher
only while an inspector page follows the flight (`Flight.saw` is swapped, not tested per event).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ..canonical.sse import dumps, sse_frame
from .runs import TERMINAL
from .timeline import Timeline

SNAPSHOT = "inspector.snapshot"
"""The first frame a follower gets: the timeline so far, and how long ago the request arrived."""


class Flight:
    """One stored foreground response generating in this process."""

    __slots__ = ("_watchers", "inputs", "landed", "owner", "request_id", "response", "saw", "stored", "timeline")

    def __init__(
        self, owner: str, response: dict[str, Any], inputs: list[dict[str, Any]], request_id: str | None,
        timeline: Timeline,
    ) -> None:  # fmt: skip
        self.owner = owner
        self.response = response
        """The renderer's Response object: its status as it goes, its output once it ends."""
        self.inputs = inputs
        self.request_id = request_id
        self.timeline = timeline
        self.saw = timeline.saw
        """Called with each event: the timeline's, or `_seen` while pages follow."""
        self.landed = asyncio.Event()
        """Set once the response is stored, or ended without being stored (its client left)."""
        self.stored = False
        self._watchers: set[asyncio.Queue[tuple[str, str] | None]] = set()

    def _seen(self, event: dict[str, Any]) -> None:
        self.timeline.saw(event)
        frame = (event["type"], dumps(event))
        for watcher in self._watchers:
            watcher.put_nowait(frame)

    def land(self, stored: bool) -> None:
        if not self.landed.is_set():
            self.stored = stored
            self.landed.set()
            for watcher in self._watchers:
                watcher.put_nowait(None)

    async def follow(self) -> AsyncIterator[bytes]:
        """The timeline so far, then each event as it happens; the terminal one once the response
        is stored (a page reloading on it finds it in the store), and never if it is not."""
        if self.landed.is_set():
            return
        entries = [dict(entry) for entry in self.timeline.entries]  # a delta run's entry grows as it goes
        watcher: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self._watchers.add(watcher)
        self.saw = self._seen
        try:
            snapshot = {"type": SNAPSHOT, "at": round(self.timeline.elapsed(), 4), "entries": entries}
            yield sse_frame(SNAPSHOT, dumps(snapshot))
            while (frame := await watcher.get()) is not None:
                kind, text = frame
                if kind in TERMINAL:
                    await self.landed.wait()
                    if not self.stored:
                        return
                yield sse_frame(kind, text)
        finally:
            self._watchers.discard(watcher)
            if not self._watchers:
                self.saw = self.timeline.saw


class Flights:
    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}

    def take_off(
        self, owner: str, response: dict[str, Any], inputs: list[dict[str, Any]], request_id: str | None,
        timeline: Timeline,
    ) -> Flight:  # fmt: skip
        flight = self._flights[response["id"]] = Flight(owner, response, inputs, request_id, timeline)
        return flight

    def land(self, flight: Flight, stored: bool) -> None:
        """The response is stored (or will not be): the store answers for it from now on."""
        self._flights.pop(flight.response["id"], None)
        flight.land(stored)

    def get(self, owner: str, response_id: str) -> Flight | None:
        flight = self._flights.get(response_id)
        return flight if flight is not None and flight.owner == owner else None

    def of(self, owner: str) -> list[Flight]:
        """This owner's flights, newest first."""
        found = [flight for flight in self._flights.values() if flight.owner == owner]
        return sorted(found, key=lambda flight: flight.timeline.started_at, reverse=True)

    def models(self, owner: str) -> set[str]:
        """The models this owner's flights are made by, for the inspector's filter."""
        return {str(f.response["model"]) for f in self._flights.values() if f.owner == owner and f.response.get("model")}
