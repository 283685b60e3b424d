"""Driving a frontend's renderer over a generation's canonical events.

Every frontend renders the same canonical stream (`events.py`) into its own events; the
orchestrator and the frontends' routes drive a renderer the same way, so this lives
below `api/` (docs/architecture.md, The map, by folder).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

from ..canonical.errors import APIError, error_type_for_status
from ..canonical.events import Error, Event, Usage
from ..operations.metrics import CLIENT_LEFT, Observer

ENDINGS = frozenset({Usage, Error})


class Renderer(Protocol):
    """Turns canonical events into a frontend's events; `finished` once it sent its last."""

    finished: bool
    error: Error | None

    def start(self) -> list[dict[str, Any]]: ...

    def feed(self, event: Event) -> list[dict[str, Any]]: ...


async def rendered(
    renderer: Renderer, events: AsyncIterator[Event], observation: Observer | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Every frontend event of one generation, ending with the renderer's last one.

    Streaming sends these; a non-streaming request folds them: one code path for both.
    Leaving early closes the engine's stream, and so its HTTP request. An `observation`
    (the metrics, `operations/metrics.py`) sees the first output token, then only `Usage` and `Error`
    events, and ends when the generation does.
    """
    if observation is not None:
        observation.begin()
    try:
        for event in renderer.start():
            yield event
        async with aclosing(events):
            async for canonical in events:
                if observation is not None and (observation.first_token is None or type(canonical) in ENDINGS):
                    observation.saw(canonical)
                for event in renderer.feed(canonical):
                    yield event
                if renderer.finished:
                    return
        error = Error("server_error", "the engine's stream ended without finishing", 502, "dropped")
        if observation is not None:
            observation.saw(error)
        for event in renderer.feed(error):
            yield event
    finally:
        if observation is not None:
            failed = renderer.error
            observation.end(str(failed.status) if failed is not None else "200" if renderer.finished else CLIENT_LEFT)


async def drain(renderer: Renderer, events: AsyncIterator[Event], observation: Observer | None = None) -> None:
    """Run a generation to its end for a non-streaming answer (the renderer keeps the result)."""
    async for _ in rendered(renderer, events, observation):
        pass


def raise_for_error(renderer: Renderer) -> None:
    """A non-streaming answer that failed becomes an HTTP error in OpenAI's envelope."""
    error = renderer.error
    if error is not None:
        raise APIError(error.status, error.message, type=error_type_for_status(error.status), code=error.code)
