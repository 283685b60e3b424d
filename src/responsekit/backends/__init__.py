"""Backends: engines that turn a `GenerationRequest` into a canonical event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from ..canonical.conversation import GenerationRequest
from ..canonical.events import Event


class Backend(Protocol):
    name: str
    counts_locally: bool
    """Counting a prompt's tokens asks no engine (an in-process model): it is done whenever a
    frontend wants the count, not only when the output maximum may not fit."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        """Stream the answer; ends with `Finish` or `Error` (never raises for engine faults)."""
        ...

    async def list_models(self) -> list[str]: ...

    def context_window(self, model: str) -> int | None:
        """Tokens a sequence of `model` holds, prompt and answer: configured, told by the engine
        (`windows.py`) or the in-process model's own; None when unknown."""
        ...

    async def count_tokens(self, request: GenerationRequest) -> tuple[int, bool]:
        """Prompt tokens of a request, and whether the count is exact."""
        ...

    async def aclose(self) -> None: ...

    def reads_images(self, model: str) -> bool | None:
        """Whether `model` reads images here: configured, told by the engine, or learned from its
        refusal; None when nobody said (the image is sent, and a refusal teaches it)."""
        ...

    def images_source(self, model: str) -> str | None:
        """Where `reads_images` comes from, for `/health` and the inspector (None: nobody said)."""
        ...

    def fetches_image_urls(self, model: str) -> bool:
        """Whether the engine fetches an image given by http(s) URL itself; when not, the image is
        fetched here and sent inline as a data URL (`orchestration/attachments.py`)."""
        ...

    def learn_text_only(self, model: str) -> None:
        """The engine refused `model` an image: from now on it gets none (`orchestration/attachments.py`)."""
        ...
