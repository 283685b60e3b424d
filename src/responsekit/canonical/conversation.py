"""The canonical request: a conversation and generation options, engine-neutral.

Frontends (Responses, Chat Completions) translate their requests into a
`GenerationRequest`; backends render it for their engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Role: TypeAlias = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(slots=True)
class TextPart:
    text: str


@dataclass(slots=True)
class ImagePart:
    """An image by URL or `data:` URL, or by the id of an uploaded file (`file_id`, with `url` empty).

    Frontends pass images as they came; the attachments stage (`orchestration/attachments.py`)
    decides before any engine sees them what each model gets: the image, or text in its place.
    """

    url: str
    detail: str = "auto"
    file_id: str | None = None


@dataclass(slots=True)
class FilePart:
    """A document (Responses `input_file`) as it came: base64 or `data:` URL `data`, a Files API
    `file_id`, or a `url`. The attachments stage turns it into its text for every model."""

    filename: str | None = None
    data: str | None = None
    file_id: str | None = None
    url: str | None = None


Part: TypeAlias = TextPart | ImagePart | FilePart


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Message:
    role: Role
    content: list[Part] = field(default_factory=list)
    reasoning: str | None = None
    """The assistant's reasoning for this turn (so models such as gpt-oss keep it across tool calls)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    """For `tool` messages: the call this is the result of."""
    tools_found: list[str] = field(default_factory=list)
    """For the result of a client's tool search: the names of the deferred tools it found,
    offered to the model from then on (`orchestration/tool_search.py`)."""

    def text(self) -> str:
        """The message's text parts joined (images left out)."""
        return "".join(part.text for part in self.content if isinstance(part, TextPart))


@dataclass(slots=True)
class FunctionTool:
    """A function the model may call, as the model sees it."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    deferred: bool = False
    """Declared with `defer_loading`: withheld from the model until a tool search finds it."""


def found_tools(found: Sequence[FunctionTool]) -> str:
    """What the model reads of a tool search's finds, whoever ran the search: the tools it may
    call from now on."""
    if not found:
        return "No tools were found."
    return "\n".join(f"Tool {tool.name} is now available" + (f": {tool.description}" if tool.description else ".")
                     for tool in found)  # fmt: skip


@dataclass(slots=True, frozen=True)
class NamedToolChoice:
    """`tool_choice` forcing one function."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "none", "required"] | NamedToolChoice


@dataclass(slots=True)
class GenerationRequest:
    model: str
    messages: list[Message]
    tools: list[FunctionTool] = field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    """Chat Completions `response_format` (`json_schema` or `json_object`), or None for text."""
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    reasoning_budget: int | None = None
    """The thinking tokens the client allows (the Messages API's `budget_tokens`, the Gemini API's
    `thinkingBudget`); None: what the effort stands for (`prompting/effort.py`)."""
    stop: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    affinity_key: str | None = None
    """What ties this request to earlier ones whose engine still caches their prompt (a
    `previous_response_id` chain, a conversation, a `prompt_cache_key`, an Anthropic session):
    a pool sends it to the member that served them. Never sent to the engine."""
