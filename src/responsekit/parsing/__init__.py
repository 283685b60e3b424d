"""Parsers that turn raw model text into canonical events, one module per output format."""

from responsekit.parsing import formats as _formats  # noqa: F401  (registers the formats)
from responsekit.parsing.base import Parser
from responsekit.parsing.detect import detect_format
from responsekit.parsing.reasoning import ReasoningFilter, ReasoningMode
from responsekit.parsing.registry import available_formats, get_parser

__all__ = [
    "Parser",
    "ReasoningFilter",
    "ReasoningMode",
    "available_formats",
    "detect_format",
    "get_parser",
]
