"""Format name → parser class.  Format modules register themselves on import."""

from __future__ import annotations

from typing import TypeVar

from responsekit.parsing.base import Parser

_PARSERS: dict[str, type[Parser]] = {}

P = TypeVar("P", bound=type[Parser])


def register(cls: P) -> P:
    """Class decorator: make `cls` available under `cls.name`."""
    existing = _PARSERS.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(f"format {cls.name!r} is already registered by {existing.__qualname__}")
    _PARSERS[cls.name] = cls
    return cls


def get_parser(name: str) -> type[Parser]:
    """The parser class for format `name`; ValueError names the known formats."""
    try:
        return _PARSERS[name]
    except KeyError:
        known = ", ".join(sorted(_PARSERS))
        raise ValueError(f"unknown parser format {name!r}; known formats: {known}") from None


def available_formats() -> list[str]:
    """The registered format names, sorted."""
    return sorted(_PARSERS)
