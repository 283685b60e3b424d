"""The parser interface, and the state-machine driver most formats build on."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from responsekit.events import Event
from responsekit.parsing.emit import EventBuffer
from responsekit.parsing.schema import ToolSchemas

Handler = Callable[[str, int], int]
"""Consumes `text[pos:]` as far as its state allows and returns the new position.

A handler may return `pos` unchanged only after switching `self.handler`."""


class Parser(ABC):
    """Turns one generation's raw text into canonical events, incrementally.

    `tools` are the request's function tools (chat or Responses shape), used to type
    values of XML-style formats; `thinking_open` says the rendered prompt already
    opened the reasoning block (decide it with `thinking_open_in`).
    """

    name: ClassVar[str]

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        self.schemas = ToolSchemas(tools)
        self.thinking_open = thinking_open

    @abstractmethod
    def feed(self, text: str) -> list[Event]:
        """Take a text delta; return the events it decides (a marker prefix is held)."""

    @abstractmethod
    def finish(self) -> list[Event]:
        """End of generation: flush held text and close open calls."""

    @classmethod
    def thinking_open_in(cls, prompt: str) -> bool:
        """Whether `prompt` (rendered, generation prompt included) ends inside reasoning."""
        return False


class StreamParser(Parser):
    """A parser run by handlers: the current one consumes text until its state changes.

    Subclasses set `self.handler` in `__init__` and implement `_finish`; events go
    through `self.out`, which coalesces them per `feed()`.
    """

    handler: Handler

    def __init__(
        self, tools: Sequence[Mapping[str, Any]] = (), *, thinking_open: bool = False
    ) -> None:
        super().__init__(tools, thinking_open=thinking_open)
        self.out = EventBuffer()

    def feed(self, text: str) -> list[Event]:
        pos, n = 0, len(text)
        while pos < n:
            pos = self.handler(text, pos)
        return self.out.take()

    def _replay(self, text: str) -> None:
        """Run the current handlers over `text`, a bounded tail a scanner held back.

        For a state change decided *after* a marker prefix was held: the prefix belongs
        to the new state, which may complete the marker with the next delta.
        """
        pos, n = 0, len(text)
        while pos < n:
            pos = self.handler(text, pos)

    def finish(self) -> list[Event]:
        self._finish()
        self.out.end_call()
        return self.out.take()

    @abstractmethod
    def _finish(self) -> None:
        """Flush whatever the current state holds back."""
