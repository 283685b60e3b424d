"""`POST /v1/responses` body -> the canonical conversation.

Top-level parameters are validated (a bad one is the client's error, a 400). Items of
the input history are translated leniently: an odd or malformed item is skipped with a
logged warning, because a replayed history with one strange item must not kill a
client's thread.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...conversation import FunctionTool, GenerationRequest, ImagePart, Message, Part, TextPart, ToolCall
from ...ids import new_id
from ...tools.file_search import format_results
from ...tools.names import CUSTOM_INPUT, ToolOrigin, ToolSet
from .tools import translate_tool_choice, translate_tools

log = logging.getLogger(__name__)


class ReasoningParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["text", "json_schema", "json_object"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_needs_name(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise ValueError("a json_schema format needs `name` and `schema`")
        return self


class TextParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ContextManagement(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["compaction"]
    compact_threshold: int | None = Field(default=None, ge=1)


class ConversationParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str


class CreateResponse(BaseModel):
    """The request body; unknown keys (Codex's `client_metadata`…) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[Any] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[Any] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    max_output_tokens: int | None = Field(default=None, ge=16)
    max_tool_calls: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    previous_response_id: str | None = None
    conversation: str | ConversationParam | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    store: bool = True
    stream: bool = False
    background: bool = False

    @property
    def conversation_id(self) -> str | None:
        return self.conversation.id if isinstance(self.conversation, ConversationParam) else self.conversation

    @property
    def compact_threshold(self) -> int | None:
        """The token count past which the history is compacted (`context_management`)."""
        entries = [entry.compact_threshold for entry in self.context_management or () if entry.compact_threshold]
        return min(entries) if entries else None

    @property
    def input_items(self) -> list[Any]:
        return [{"role": "user", "content": self.input}] if isinstance(self.input, str) else self.input
    include: list[str] = Field(default_factory=list)
    truncation: Literal["auto", "disabled"] = "disabled"
    context_management: list[ContextManagement] | None = None
    service_tier: str | None = None


@dataclass(slots=True)
class Translation:
    """What the frontend needs besides the body: the canonical request and the tool mapping."""

    generation: GenerationRequest
    toolset: ToolSet


def translate(
    body: CreateResponse, items: list[Any], served: Sequence[tuple[ToolOrigin, FunctionTool]] = ()
) -> Translation:
    """The canonical request for `body`, over `items` (the history and the new input).

    `served` are the tools this server runs itself for the request (file_search, MCP).
    """
    toolset = translate_tools(body.tools, served)
    tool_choice, functions = translate_tool_choice(body.tool_choice, toolset)
    messages: list[Message] = []
    if body.instructions:
        messages.append(Message("system", [TextPart(body.instructions)]))
    messages.extend(translate_items(items, toolset))
    generation = GenerationRequest(
        model=body.model,
        messages=messages,
        tools=functions,
        tool_choice=tool_choice,
        parallel_tool_calls=body.parallel_tool_calls if functions else None,
        response_format=_response_format(body.text),
        max_output_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        reasoning_effort=body.reasoning.effort if body.reasoning else None,
        user=body.safety_identifier or body.user,
        prompt_cache_key=body.prompt_cache_key,
    )
    return Translation(generation, toolset)


def _response_format(text: TextParam | None) -> dict[str, Any] | None:
    form = text.format if text else None
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return {"type": "json_object"}
    schema: dict[str, Any] = {"name": form.name, "schema": form.schema_}
    if form.description is not None:
        schema["description"] = form.description
    if form.strict is not None:
        schema["strict"] = form.strict
    return {"type": "json_schema", "json_schema": schema}


class _Skip(Exception):
    """An input item that cannot be used; it is skipped with a warning."""


def translate_items(items: list[Any], toolset: ToolSet) -> list[Message]:
    """Input items -> canonical messages; each odd item is skipped with a warning."""
    builder = _HistoryBuilder(toolset)
    for item in items:
        try:
            builder.add(item)
        except _Skip as reason:
            where = item.get("id", "without id") if isinstance(item, dict) else "that is not an object"
            log.warning("skipping input item %s for the model: %s", where, reason)
    return builder.finish()


class _HistoryBuilder:
    def __init__(self, toolset: ToolSet) -> None:
        self.toolset = toolset
        self.messages: list[Message] = []
        self.pending_reasoning: list[str] = []
        self.tool_images: list[Part] = []

    def add(self, item: Any) -> None:
        if not isinstance(item, dict):
            raise _Skip(f"not an object: {str(item)[:80]!r}")
        kind = item.get("type", "message" if "role" in item else None)
        handler = getattr(self, f"_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            raise _Skip(f"item type {kind!r} is not used by chat models")
        if kind not in ("function_call_output", "custom_tool_call_output"):
            self._flush_tool_images()
        handler(item)

    def finish(self) -> list[Message]:
        self._flush_tool_images()
        return _answer_every_call(self.messages)

    # --- item types -------------------------------------------------------------------

    def _message(self, item: dict[str, Any]) -> None:
        role = item.get("role")
        if role not in ("system", "developer", "user", "assistant"):
            raise _Skip(f"message role {role!r}")
        parts = _content_parts(item.get("content"), role)
        if role == "assistant":
            turn = self._assistant_turn(allow_append=False)
            turn.content.extend(parts)
        else:
            self.messages.append(Message(role, parts))

    def _reasoning(self, item: dict[str, Any]) -> None:
        text = _reasoning_text(item)
        if text:
            self.pending_reasoning.append(text)

    def _function_call(self, item: dict[str, Any]) -> None:
        name, arguments = item.get("name"), item.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise _Skip("function_call without a name")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = item.get("call_id") or item.get("id") or new_id("call")
        model_name = self.toolset.model_name(name, item.get("namespace"))
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(str(call_id), model_name, arguments))

    def _custom_tool_call(self, item: dict[str, Any]) -> None:
        name, text = item.get("name"), item.get("input", "")
        if not isinstance(name, str) or not name:
            raise _Skip("custom_tool_call without a name")
        arguments = json.dumps({CUSTOM_INPUT: text if isinstance(text, str) else str(text)}, ensure_ascii=False)
        call_id = item.get("call_id") or item.get("id") or new_id("call")
        model_name = self.toolset.model_name(name, item.get("namespace"))
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(str(call_id), model_name, arguments))

    def _function_call_output(self, item: dict[str, Any]) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _Skip("tool output without a call_id")
        if not any(call.id == call_id for m in self.messages for call in m.tool_calls):
            raise _Skip(f"tool output for unknown call {call_id!r}")
        parts = _content_parts(item.get("output"), "tool")
        text = "".join(part.text for part in parts if isinstance(part, TextPart))
        images = [part for part in parts if isinstance(part, ImagePart)]
        if images:
            self.tool_images += [TextPart(f"Images returned by tool call {call_id}:"), *images]
        self.messages.append(Message("tool", [TextPart(text)], tool_call_id=call_id))

    _custom_tool_call_output = _function_call_output

    def _mcp_call(self, item: dict[str, Any]) -> None:
        """An MCP call the server ran: the model sees its call and what came back."""
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise _Skip("mcp_call without a name")
        call_id = str(item.get("id") or new_id("call"))
        model_name = self.toolset.model_name(name, item.get("server_label"))
        arguments = item.get("arguments") or "{}"
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(call_id, model_name, str(arguments)))
        error = item.get("error")
        if isinstance(error, dict):
            error = error.get("message") or json.dumps(error.get("content", error), ensure_ascii=False)
        result = f"Error: {error}" if error else str(item.get("output") or "")
        self.messages.append(Message("tool", [TextPart(result)], tool_call_id=call_id))

    def _file_search_call(self, item: dict[str, Any]) -> None:
        """A search the server ran: the model sees its queries and the results (when kept)."""
        call_id = str(item.get("id") or new_id("call"))
        arguments = json.dumps({"queries": item.get("queries") or []}, ensure_ascii=False)
        turn = self._assistant_turn(allow_append=True)
        turn.tool_calls.append(ToolCall(call_id, self.toolset.model_name("file_search"), arguments))
        results = item.get("results")
        text = format_results(results) if results else "The results of this search were not kept."
        self.messages.append(Message("tool", [TextPart(text)], tool_call_id=call_id))

    def _mcp_list_tools(self, item: dict[str, Any]) -> None:
        """Listings are for the client and the server (which reuses them), not the model."""

    def _mcp_approval_request(self, item: dict[str, Any]) -> None:
        """A call still waiting for approval has not happened (an approved one arrives as an mcp_call)."""

    def _mcp_approval_response(self, item: dict[str, Any]) -> None:
        """Approvals are acted on by the orchestrator before generation."""

    # --- helpers ----------------------------------------------------------------------

    def _assistant_turn(self, *, allow_append: bool) -> Message:
        """The assistant message this item belongs to, carrying any reasoning before it.

        Tool calls join the assistant message just before them; an assistant message
        after reasoning or tool results starts a new turn.
        """
        last = self.messages[-1] if self.messages else None
        if (
            allow_append
            and not self.pending_reasoning
            and last is not None
            and last.role == "assistant"
        ):
            return last
        turn = Message("assistant")
        if self.pending_reasoning:
            turn.reasoning = "\n\n".join(self.pending_reasoning)
            self.pending_reasoning.clear()
        self.messages.append(turn)
        return turn

    def _flush_tool_images(self) -> None:
        """Chat tool messages hold text only, so images from tool outputs follow as a user turn."""
        if self.tool_images:
            self.messages.append(Message("user", self.tool_images))
            self.tool_images = []


def _answer_every_call(messages: list[Message]) -> list[Message]:
    """Give every tool call a result, as chat engines require; a missing one is stated as such."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    out: list[Message] = []
    unanswered: list[ToolCall] = []
    for message in messages:
        if message.role != "tool":
            out.extend(_no_output(call) for call in unanswered)
            unanswered = []
        out.append(message)
        unanswered += [call for call in message.tool_calls if call.id not in answered]
    out.extend(_no_output(call) for call in unanswered)
    return out


def _no_output(call: ToolCall) -> Message:
    log.warning("tool call %s has no output in the history; telling the model so", call.id)
    return Message("tool", [TextPart("No output was recorded for this tool call.")], tool_call_id=call.id)


def _reasoning_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    texts: list[str] = []
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if not any(texts):
        summary = item.get("summary")
        if isinstance(summary, list):
            texts = [p.get("text", "") for p in summary if isinstance(p, dict) and isinstance(p.get("text"), str)]
        elif isinstance(summary, str):
            texts = [summary]
    return "\n".join(text for text in texts if text)


def _content_parts(content: Any, role: str) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        raise _Skip(f"{role} content is neither a string nor a list")
    parts: list[Part] = []
    for part in content:
        if isinstance(part, str):
            parts.append(TextPart(part))
            continue
        if not isinstance(part, dict):
            log.warning("skipping a content part that is not an object")
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            parts.append(TextPart(str(part.get("text", ""))))
        elif kind == "refusal":
            parts.append(TextPart(str(part.get("refusal", ""))))
        elif kind == "input_image":
            url = part.get("image_url")
            if isinstance(url, dict):
                url = url.get("url")
            if isinstance(url, str) and url:
                parts.append(ImagePart(url, str(part.get("detail") or "auto")))
            else:
                log.warning("skipping an input_image without an image_url (file ids are not stored here)")
        elif kind == "input_file":
            parts.append(TextPart(_file_text(part)))
        else:
            log.warning("skipping a content part of type %r", kind)
    return parts


def _file_text(part: dict[str, Any]) -> str:
    """An `input_file` as text the model can read, headed by its filename."""
    filename = part.get("filename") or part.get("file_id") or "file"
    data = part.get("file_data")
    if isinstance(data, str) and data:
        payload = data.split(",", 1)[1] if data.startswith("data:") and "," in data else data
        try:
            text = base64.b64decode(payload, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return f"[file {filename}: binary content that cannot be shown as text]"
        return f"[file {filename}]\n{text}\n[end of file {filename}]"
    if part.get("file_url"):
        return f"[file {filename} at {part['file_url']}]"
    return f"[file {filename}]"


def initial_response(body: CreateResponse, toolset: ToolSet) -> dict[str, Any]:
    """The Response object as it starts: the request echoed, no output yet.

    It carries the superset of keys strict clients need (OpenAPI's required nullable keys
    and the Open Responses set): integer timestamps, numbers rather than nulls for
    `temperature` and `top_p`, `status` always present.
    """
    text = body.text.model_dump(by_alias=True, exclude_none=True) if body.text else {}
    text.setdefault("format", {"type": "text"})
    reasoning = body.reasoning.model_dump(exclude_none=True) if body.reasoning else None
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "queued" if body.background else "in_progress",
        "background": body.background,
        "conversation": {"id": body.conversation_id} if body.conversation_id else None,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "model": body.model,
        "output": [],
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "prompt_cache_key": body.prompt_cache_key,
        "reasoning": {"effort": None, "summary": None, **reasoning} if reasoning is not None else None,
        "safety_identifier": body.safety_identifier,
        "service_tier": "default",
        "store": body.store,
        "temperature": body.temperature if body.temperature is not None else 1.0,
        "text": text,
        "tool_choice": body.tool_choice,
        "tools": toolset.echo,
        "top_logprobs": body.top_logprobs or 0,
        "top_p": body.top_p if body.top_p is not None else 1.0,
        "truncation": body.truncation,
        "usage": None,
        "user": body.user,
        "metadata": body.metadata or {},
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
