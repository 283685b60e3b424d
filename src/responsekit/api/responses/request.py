"""`POST /v1/responses` body -> what the orchestrator runs (`ResponseRequest`).

Top-level parameters are validated (a bad one is the client's error, a 400). The input
items are the store's vocabulary: the orchestrator reads the history they continue and
translates them (`history.py`).
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ...canonical.conversation import GenerationRequest, Message, TextPart
from ...canonical.errors import APIError
from ...canonical.ids import new_id
from ...canonical.server_tools import SEARCH, CodeSpec, ServerToolSpecs, check_spec
from ...canonical.toolset import ToolSet
from ...orchestration import client_tools
from ...orchestration.orchestrator import ResponseRequest
from ...orchestration.sealing import Sealer
from .compaction import CompactionRenderer
from .render import ResponseRenderer
from .tools import WEB_SEARCH_TOOL_TYPES, translate_tool_choice, translate_tools

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


def translate(body: CreateResponse, sealer: Sealer, web_search: bool = False) -> ResponseRequest:
    """What the orchestrator runs for `body`: the canonical request without its conversation,
    the options it acts on, and the renderer of the Response. `web_search`: whether the
    server has a search engine (else web search tools are dropped, as OpenAI's unknown ones).

    The request's own mistakes are found here (400s), before any history is read; the
    orchestrator adds the history, the input and the tools it serves.
    """
    if body.previous_response_id and body.conversation_id:
        raise APIError(
            400, "Use either `previous_response_id` or `conversation`, not both.", param="conversation",
            code="invalid_value",
        )  # fmt: skip
    if body.background and not body.store:
        raise APIError(400, "Background responses must be stored (`store: true`).", param="background",
                       code="invalid_value")  # fmt: skip
    mcp = _mcp_specs(body.tools)
    searches = [(i, tool) for i, tool in enumerate(body.tools) if isinstance(tool, dict)
                and tool.get("type") == "file_search"]  # fmt: skip
    webs = [(i, tool) for i, tool in enumerate(body.tools) if isinstance(tool, dict)
            and tool.get("type") in WEB_SEARCH_TOOL_TYPES] if web_search else []  # fmt: skip
    for position, tool in webs:
        check_spec(tool, f"tools[{position}]")
    code = _code_specs(body.tools)
    toolset = translate_tools(body.tools, web_search)
    generation = GenerationRequest(
        model=body.model,
        messages=[Message("system", [TextPart(body.instructions)])] if body.instructions else [],
        tool_choice=translate_tool_choice(body.tool_choice, toolset, bool(webs), _code_types(code)),
        parallel_tool_calls=body.parallel_tool_calls,
        response_format=_response_format(body.text),
        max_output_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        reasoning_effort=body.reasoning.effort if body.reasoning else None,
        user=body.safety_identifier or body.user,
        prompt_cache_key=body.prompt_cache_key,
    )
    seal = partial(sealer.seal, "reasoning") if "reasoning.encrypted_content" in body.include else None
    renderer = partial(ResponseRenderer, initial_response(body, toolset), seal=seal,
                       search_results="file_search_call.results" in body.include,
                       web_sources="web_search_call.action.sources" in body.include,
                       code_outputs="code_interpreter_call.outputs" in body.include)  # fmt: skip
    items, compaction = _without_trigger(body.input_items)
    if compaction:
        renderer = partial(CompactionRenderer, initial_response(body, toolset),
                           seal_summary=partial(sealer.seal, "compaction"))  # fmt: skip
    reasoning = body.reasoning
    return ResponseRequest(
        generation,
        toolset,
        renderer,
        input=items,
        previous_response_id=body.previous_response_id,
        conversation_id=body.conversation_id,
        store=body.store,
        background=body.background,
        server_tools=ServerToolSpecs(
            web_search=webs[0][1] if webs else None,
            tool_search="bm25" if any(isinstance(tool, dict) and tool.get("type") == "tool_search"
                                      and tool.get("execution") in (None, "server") for tool in body.tools) else None,
            file_search=searches[0] if searches else None,
            mcp=mcp,
            forced=_forced(body.tool_choice, code),
            max_tool_calls=body.max_tool_calls,
            code=code,
        ),
        truncation=body.truncation == "auto",
        compact_threshold=body.compact_threshold,
        compaction=compaction,
        reasoning_summary=(reasoning.summary or reasoning.generate_summary) if reasoning else None,
    )


def _without_trigger(items: list[Any]) -> tuple[list[Any], bool]:
    """The input without the `compaction_trigger` that ends it, and whether one did. Anywhere
    else the trigger is a 400, as OpenAI answers ("must be the final input item")."""
    triggers = [position for position, item in enumerate(items)
                if isinstance(item, dict) and item.get("type") == "compaction_trigger"]  # fmt: skip
    if not triggers:
        return items, False
    if triggers != [len(items) - 1]:
        raise APIError(400, "The 'compaction_trigger' item must be the final input item.",
                       param=f"input[{triggers[0]}]", code="invalid_value")  # fmt: skip
    return items[:-1], True


def _code_specs(tools: list[Any]) -> list[CodeSpec]:
    """The code the server runs: `code_interpreter` (`python`, in its `container`) and the
    hosted `shell` tool (`shell`, in its `container_auto` or `container_reference` environment),
    each `container` checked for its shape here (a 400), its owner when the tools are prepared."""
    specs = []
    for position, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "code_interpreter":
            param, container, functions = f"tools[{position}].container", tool.get("container"), ("python",)
            kinds: tuple[str, ...] = ("auto",)
        elif tool.get("type") == "shell" and not client_tools.client_run(tool):
            param, container, functions = f"tools[{position}].environment", tool.get("environment"), ("shell",)
            kinds = ("container_auto", "container_reference")
        else:
            continue
        if container is None:
            raise APIError(400, f"Missing required parameter: '{param}'.", param=param,
                           code="missing_required_parameter")  # fmt: skip
        if not (isinstance(container, str) and container and functions == ("python",)) and not (
                isinstance(container, dict) and container.get("type") in kinds):  # fmt: skip
            shapes = "a container id or {\"type\": \"auto\"}" if functions == ("python",) else (
                "{\"type\": \"container_auto\"} or {\"type\": \"container_reference\", \"container_id\": ...}")
            raise APIError(400, f"`{param}` must be {shapes}.", param=param, code="invalid_value")
        if isinstance(container, dict) and container.get("type") == "container_reference" and not (
                isinstance(container.get("container_id"), str) and container["container_id"]):  # fmt: skip
            raise APIError(400, f"Missing required parameter: '{param}.container_id'.", param=f"{param}.container_id",
                           code="missing_required_parameter")  # fmt: skip
        specs.append(CodeSpec(container, functions, param=param))
    return specs


def _code_types(code: list[CodeSpec]) -> frozenset[str]:
    """The hosted tool types the code specs serve (`code_interpreter`, `shell`)."""
    return frozenset("code_interpreter" if "python" in spec.functions else "shell" for spec in code)


def _forced(choice: Any, code: list[CodeSpec]) -> str | None:
    """The server function a tool choice forces: a web search, or the code tool it names."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in WEB_SEARCH_TOOL_TYPES:
        return SEARCH
    if kind == "code_interpreter" and "code_interpreter" in _code_types(code):
        return "python"
    if kind == "shell" and "shell" in _code_types(code):
        return "shell"
    return None


def _mcp_specs(tools: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    """The request's `mcp` tools with their positions in `tools`, refused (400) when a key the
    server reads has the wrong shape."""
    specs = []
    for position, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "mcp":
            continue
        label, headers = tool.get("server_label"), tool.get("headers")
        if not isinstance(label, str) or not label:
            raise APIError(400, "An mcp tool needs a `server_label`.", param=f"tools[{position}].server_label",
                           code="invalid_value")  # fmt: skip
        if headers is not None and not isinstance(headers, dict):
            raise APIError(400, "`headers` must be an object of strings.", param=f"tools[{position}].headers",
                           code="invalid_type")  # fmt: skip
        if not isinstance(tool.get("authorization") or "", str):
            raise APIError(400, "`authorization` must be a string.", param=f"tools[{position}].authorization",
                           code="invalid_type")  # fmt: skip
        specs.append((position, tool))
    return specs


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
        "tools": _without_secrets(toolset.echo),
        "top_logprobs": body.top_logprobs or 0,
        "top_p": body.top_p if body.top_p is not None else 1.0,
        "truncation": body.truncation,
        "usage": None,
        "user": body.user,
        "metadata": body.metadata or {},
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }


def _without_secrets(tools: list[Any]) -> list[Any]:
    """The tools as the Response echoes and stores them: an MCP server's `authorization` and
    `headers` left out. Like OpenAI, the server keeps neither (a client sends them with each
    request), so they reach no store, no log of stored data and no later reader."""
    return [
        {key: value for key, value in tool.items() if key not in ("authorization", "headers")}
        if isinstance(tool, dict) and tool.get("type") == "mcp"
        else tool
        for tool in tools
    ]
