"""`POST /v1/chat/completions` body -> the canonical conversation.

Messages are a replayed history too, so an odd one is skipped with a warning rather
than refused; top-level parameters are validated.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...canonical.conversation import (
    FilePart,
    FunctionTool,
    GenerationRequest,
    ImagePart,
    Message,
    NamedToolChoice,
    Part,
    TextPart,
    ToolCall,
    ToolChoice,
)
from ...canonical.errors import APIError
from ...canonical.ids import new_id
from ...canonical.server_tools import check_spec

log = logging.getLogger(__name__)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class CreateChatCompletion(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Any] = Field(min_length=1)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    web_search_options: dict[str, Any] | None = None
    """Search the web before answering (`search_context_size`, `user_location`): the server's
    web search, when it has one (docs/web-search.md)."""

    def web_search_spec(self) -> dict[str, Any] | None:
        """`web_search_options` as a Responses web_search tool, or None without them (400 when malformed)."""
        options = self.web_search_options
        if options is None:
            return None
        location = options.get("user_location")
        if location is not None and not isinstance(location, dict):
            raise APIError(400, "`user_location` must be an object.", param="web_search_options.user_location",
                           code="invalid_value")  # fmt: skip
        spec = {"type": "web_search", "search_context_size": options.get("search_context_size"),
                "user_location": (location or {}).get("approximate")}  # fmt: skip
        check_spec(spec, "web_search_options")
        return spec


def translate(body: CreateChatCompletion) -> GenerationRequest:
    tools = [_tool(position, tool) for position, tool in enumerate(body.tools)]
    messages: list[Message] = []
    for position, message in enumerate(body.messages):
        translated = _message(message)
        if translated is None:
            log.warning("skipping message %d: %s", position, str(message)[:120])
        else:
            messages.append(translated)
    if not messages:
        raise APIError(400, "No usable message in `messages`.", param="messages", code="invalid_value")
    return GenerationRequest(
        model=body.model,
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(body.tool_choice, tools),
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=body.response_format,
        max_output_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        reasoning_effort=body.reasoning_effort,
        stop=[body.stop] if isinstance(body.stop, str) else body.stop,
        seed=body.seed,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        user=body.safety_identifier or body.user,
        prompt_cache_key=body.prompt_cache_key,
        affinity_key=f"prompt_cache_key:{body.prompt_cache_key}" if body.prompt_cache_key else None,
    )


def _tool(position: int, tool: dict[str, Any]) -> FunctionTool:
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict) or not function.get("name"):
        raise APIError(400, "Each tool must be a function with a name.", param=f"tools[{position}]", code="invalid_value")
    return FunctionTool(function["name"], function.get("description"), function.get("parameters"), function.get("strict"))


def _tool_choice(choice: Any, tools: list[FunctionTool]) -> ToolChoice:
    if choice is None or choice in ("auto", "none", "required"):
        return choice or "auto"
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if any(tool.name == name for tool in tools):
            return NamedToolChoice(name)
        raise APIError(400, f"tool_choice names `{name}`, which is not among the tools.", param="tool_choice", code="invalid_value")
    raise APIError(400, f"Invalid tool_choice: {choice!r}.", param="tool_choice", code="invalid_value")


def _message(message: Any) -> Message | None:
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    parts = _parts(message.get("content"))
    if parts is None:
        return None
    if role in ("system", "developer", "user"):
        return Message(role, parts)
    if role == "assistant":
        calls = []
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not function.get("name"):
                log.warning("skipping a malformed tool call in an assistant message")
                continue
            arguments = function.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            calls.append(ToolCall(str(call.get("id") or new_id("call")), function["name"], arguments))
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if message.get("refusal") and not parts:
            parts = [TextPart(str(message["refusal"]))]
        return Message("assistant", parts, reasoning if isinstance(reasoning, str) else None, calls)
    if role == "tool" and message.get("tool_call_id"):
        return Message("tool", parts, tool_call_id=str(message["tool_call_id"]))
    return None


def _parts(content: Any) -> list[Part] | None:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        return None
    parts: list[Part] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append(TextPart(str(part.get("text", ""))))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str):
                detail = image.get("detail", "auto") if isinstance(image, dict) else "auto"
                parts.append(ImagePart(url, detail or "auto"))
        elif kind == "file" and isinstance(part.get("file"), dict):
            parts.append(_file_part(part["file"]))
        else:
            log.warning("skipping a content part of type %r", kind)
    return parts


def _file_part(file: dict[str, Any]) -> FilePart:
    """A `file` part as it came; the attachments stage reads its text (`orchestration/attachments.py`)."""
    fields = [file.get(key) for key in ("filename", "file_data", "file_id")]
    filename, data, file_id = (value if isinstance(value, str) and value else None for value in fields)
    return FilePart(filename, data, file_id)
