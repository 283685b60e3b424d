"""The canonical event stream: the one vocabulary between backends and frontends.

Backends (chat upstreams, raw-completion engines, the in-process engine) and parsers
produce these; the Responses and Chat Completions frontends render them.  A
non-streaming answer is the fold of the same stream, so both paths share one code path.

Events are created once per token on the hot path, so they are plain slotted dataclasses
(not frozen, which costs twice as much to construct); treat them as immutable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias


@dataclass(slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (chain of thought) text."""

    text: str


@dataclass(slots=True)
class ReasoningSummaryDelta:
    """A piece of a summary of the reasoning so far, written by a summarizer model.

    Comes after the reasoning it summarizes and before whatever ends that reasoning.
    """

    text: str


@dataclass(slots=True)
class TextDelta:
    """A piece of the visible answer."""

    text: str


@dataclass(slots=True)
class RefusalDelta:
    """A piece of a refusal (OpenAI's `refusal` field)."""

    text: str


@dataclass(slots=True)
class ToolCallStart:
    """A tool call begins; `index` identifies it in the events that follow.

    `id` is the call id the engine or model wrote, or one generated for it.
    """

    index: int
    id: str
    name: str


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of a call's JSON arguments; the fragments join to the final string."""

    index: int
    arguments: str


@dataclass(slots=True)
class ToolCallEnd:
    """The call's arguments are complete."""

    index: int


@dataclass(slots=True)
class ToolResult:
    """The server ran the tool call `index` (file_search, MCP): what came back.

    `output` is what the model reads next; `data` holds what the client's item shows
    (search results and citations, for instance).
    """

    index: int
    output: str
    error: str | None = None
    data: dict[str, Any] | None = None

    @property
    def read(self) -> str:
        """What the model reads of it: the output, or the error after `Error: `."""
        return f"Error: {self.error}" if self.error else self.output


@dataclass(slots=True)
class Usage:
    """Token counts of the whole generation."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0


FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter"]


@dataclass(slots=True)
class Finish:
    """Generation ended normally; `length` means the token limit cut it."""

    reason: FinishReason


@dataclass(slots=True)
class Error:
    """Generation failed; ends the stream.

    `code` is an OpenAI error code (`context_length_exceeded`, `rate_limit_exceeded`,
    `server_error`…) and `status` the HTTP status a non-streaming client gets. `fault` names
    an engine fault the code does not tell apart (`refused`, `dropped`, `malformed`) for the
    metrics (`operations/metrics.py`); the client never sees it. `unanswered` marks an engine that never
    began an answer (refused, reset, 502/503, connect timeout): a pool may send the request
    to another member instead (`backends/pool.py`). A context overflow carries the prompt's
    tokens and the model's window when the engine told them or the gateway counted them: each
    frontend words them as its clients act on (Claude Code compacts by the two numbers).
    """

    code: str
    message: str
    status: int = 502
    fault: str | None = None
    unanswered: bool = False
    prompt_tokens: int | None = None
    window: int | None = None


Event: TypeAlias = (
    ReasoningDelta
    | ReasoningSummaryDelta
    | TextDelta
    | RefusalDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | ToolResult
    | Usage
    | Finish
    | Error
)
