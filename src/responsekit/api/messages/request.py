"""`POST /v1/messages` body (Anthropic's Messages API) -> the canonical conversation.

Top-level parameters are validated (a bad one is a 400); `messages` is a replayed history,
so an odd message or block in it is skipped with a warning rather than refused.
Thinking blocks come back with the `signature` this server sealed them with: opened, their
reasoning reaches the model again; a signature that does not open (another server's,
tampered) leaves the block out.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import dataclass, field
from typing import Any

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
    found_tools,
)
from ...canonical.errors import APIError
from ...canonical.server_tools import (
    FETCH,
    MAX_TOOL_SEARCHES,
    SEARCH,
    TOOL_SEARCHES,
    ServerToolSpecs,
    ToolSearchMode,
    check_fetch_spec,
    check_spec,
)
from ...files.extract import ExtractionError, extract_text
from ...orchestration.context_editing import ContextEdit
from ...orchestration.sealing import Sealer
from .client_tools import client_tool, is_client_tool
from .code_execution import (
    MAX_CODE_CALLS,
    code_spec,
    container_of,
    is_code_execution,
    is_result,
    replayed_call,
    replayed_result,
)
from .connector import MAX_MCP_CALLS, mcp_specs
from .context_management import context_edits

log = logging.getLogger(__name__)

SEARCHES = frozenset(TOOL_SEARCHES.values())
"""The names of the tool search tool's `server_tool_use` blocks."""

BILLING_HEADER = "x-anthropic-billing-header:"
"""The line Claude Code puts first in its system prompt; it changes on every request."""


class MessageParams(BaseModel):
    """What `/v1/messages` and `/v1/messages/count_tokens` share."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Any] = Field(min_length=1)
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None
    mcp_servers: Any = None
    """The MCP connector's servers (`connector.py`), checked there."""
    container: Any = None
    """The container code execution runs in: an id, or `{"id", "skills"}` (`code_execution.py`)."""


class CreateMessage(MessageParams):
    max_tokens: int = Field(ge=1)
    """Required, as Anthropic's API has it; above what the engine's context leaves, clamped by the route."""
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    """Accepted; the canonical request has no top-k (engines keep their own)."""
    stop_sequences: list[str] | None = None
    metadata: dict[str, Any] | None = None


@dataclass(slots=True)
class Translation:
    generation: GenerationRequest
    show_thinking: bool
    """False for `thinking.display = "omitted"`: thinking blocks carry only their signature."""
    stop_sequences: list[str]
    """Applied by the renderer, which can then say which one stopped the answer."""
    server_tools: ServerToolSpecs
    """The request's `web_search_*` server tool as a web search (search only: Anthropic's search
    reads no page) and its `web_fetch_*` tool as a page fetch, run when the server has a search
    engine; its MCP connector's servers (`connector.py`). The loop is bounded by the web tools'
    `max_uses`, and with MCP servers by `MAX_MCP_CALLS` more (a web tool without `max_uses`
    then counts as many)."""
    context_edits: list[ContextEdit] | None = None
    """`context_management`'s edits, applied by the pipeline; None when the request has none."""
    uploads: list[tuple[str, TextPart]] = field(default_factory=list)
    """The Files API files of the user's `container_upload` blocks, each with the text the model
    reads in its place, which the route writes once the file is in the container."""


def translate(body: MessageParams, sealer: Sealer, *, strip_billing_header: bool = True,
              web_search: bool = False) -> Translation:  # fmt: skip
    """`web_search`: whether the server has a search engine to run `web_search_*` server tools with."""
    tools, web, fetch, search, code = _tools(body.tools or [], web_search)
    container = container_of(body.container)
    system = _system(body.system)
    messages: list[Message] = []
    named = {tool.name: tool for tool in tools}
    uploads: list[tuple[str, TextPart]] | None = [] if code is not None else None
    for position, message in enumerate(body.messages):
        translated = _message(message, sealer, system, named, uploads)
        if translated is None:
            log.warning("skipping message %d: %s", position, str(message)[:120])
        messages += translated or []
    if strip_billing_header and system:
        system[0] = _without_billing_header(system[0])
    system = [text for text in system if text]
    if system:
        messages.insert(0, Message("system", [TextPart("\n".join(system))]))
    if not any(message.role != "system" for message in messages):
        raise APIError(400, "No usable message in `messages`.", param="messages", code="invalid_value")
    edits = context_edits(body.context_management)
    choice, parallel, forced = _tool_choice(body.tool_choice, tools, web, fetch, code)
    effort, show = _thinking(body.thinking, body.output_config)
    generation = GenerationRequest(model=body.model, messages=messages, tools=tools, tool_choice=choice,
                                   parallel_tool_calls=parallel, reasoning_effort=effort)  # fmt: skip
    if body.thinking is not None and body.thinking.get("type") == "enabled":
        generation.reasoning_budget = body.thinking["budget_tokens"]  # checked by `_thinking`
    stops: list[str] = []
    if isinstance(body, CreateMessage):
        generation.max_output_tokens = body.max_tokens
        generation.temperature = body.temperature
        generation.top_p = body.top_p
        stops = [stop for stop in body.stop_sequences or () if stop]
        user_id = (body.metadata or {}).get("user_id")
        if isinstance(user_id, str) and user_id:  # Claude Code's user_id names its session
            generation.affinity_key = f"user_id:{user_id}"
    run = [spec for spec in (web, fetch) if spec is not None]
    uses = [spec.get("max_uses") for spec in run]
    specs = ServerToolSpecs(web_search=web, web_fetch=fetch, tool_search=search, forced=forced,
                            max_tool_calls=None if None in uses else sum(uses))  # fmt: skip
    toolsets = [(position, tool) for position, tool in enumerate(body.tools or [])
                if isinstance(tool, dict) and tool.get("type") == "mcp_toolset"]  # fmt: skip
    specs.mcp = mcp_specs(body.mcp_servers, toolsets)
    if code is not None:
        specs.code = [code_spec(code, container)]
    if specs.mcp or specs.code:  # bounded, also beside a web tool without `max_uses`
        specs.max_tool_calls = (MAX_MCP_CALLS if specs.mcp else 0) + (MAX_CODE_CALLS if specs.code else 0) + sum(
            MAX_MCP_CALLS if use is None else use for use in uses)  # fmt: skip
    if search is not None and specs.max_tool_calls is not None:
        specs.max_tool_calls += MAX_TOOL_SEARCHES
    return Translation(generation, show, stops, specs, edits, uploads or [])


def _without_billing_header(text: str) -> str:
    """The system prompt without Claude Code's billing line, so the engine's prefix cache holds."""
    if not text.startswith(BILLING_HEADER):
        return text
    _, _, rest = text.partition("\n")
    return rest


def _system(system: str | list[Any] | None) -> list[str]:
    if system is None:
        return []
    if isinstance(system, str):
        return [system]
    texts = []
    for position, block in enumerate(system):
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])  # cache_control is accepted and ignored
        else:
            raise APIError(400, "`system` must be a string or a list of text blocks.", param=f"system.{position}",
                           code="invalid_value")  # fmt: skip
    return texts


def _tools(tools: list[Any], web_search: bool) -> tuple[list[FunctionTool], dict[str, Any] | None,
                                                        dict[str, Any] | None, ToolSearchMode | None,
                                                        dict[str, Any] | None]:  # fmt: skip
    """Client tools as functions, the web search and web fetch server tools when the server runs
    them (docs/web-search.md), the tool search tool (`tools/tool_search.py`, run over the
    deferred tools) and the code execution tool (`code_execution.py`). The Anthropic-defined
    tools the client runs (`bash_*`, `text_editor_*`, `computer_*`, `memory_*`) are functions
    with their documented schemas (`client_tools.py`).
    Other server tools have nobody to run them here: left out with a warning.
    A `defer_loading` tool is deferred: offered once a `tool_reference` names it (Claude Code's
    ToolSearch answers with those; `orchestration/tool_search.py`)."""
    functions = []
    web: dict[str, Any] | None = None
    fetch: dict[str, Any] | None = None
    search: ToolSearchMode | None = None
    code: dict[str, Any] | None = None
    for position, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise APIError(400, "Each tool must be an object.", param=f"tools.{position}", code="invalid_value")
        if str(tool.get("type") or "").startswith("web_search_") and web_search and web is None:
            web = _web_search(tool, f"tools.{position}")
            continue
        if str(tool.get("type") or "").startswith("web_fetch_") and web_search and fetch is None:
            fetch = check_fetch_spec(tool, f"tools.{position}")
            continue
        kind = str(tool.get("type") or "")
        if kind.startswith(("tool_search_tool_regex", "tool_search_tool_bm25")):
            if search is not None:
                raise APIError(400, "Give one tool search tool.", param=f"tools.{position}", code="invalid_value")
            search = "regex" if kind.startswith("tool_search_tool_regex") else "bm25"
            continue
        if tool.get("type") == "mcp_toolset":  # the MCP connector's (connector.py)
            continue
        if is_code_execution(tool):
            if code is not None:
                raise APIError(400, "Give one code execution tool.", param=f"tools.{position}", code="invalid_value")
            code = tool
            continue
        if is_client_tool(tool):  # Anthropic-defined, run by the client: a function (client_tools.py)
            functions.append(client_tool(tool, f"tools.{position}"))
            continue
        if tool.get("type") not in (None, "custom"):
            log.warning("leaving out server tool %r (%s): this server does not run it", tool.get("name"), tool["type"])
            continue
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name or not isinstance(schema, dict):
            raise APIError(400, "Each tool needs a `name` and an `input_schema` object.", param=f"tools.{position}",
                           code="invalid_value")  # fmt: skip
        description = tool.get("description")
        strict = tool.get("strict")
        functions.append(FunctionTool(name, description if isinstance(description, str) else None, schema,
                                      strict if isinstance(strict, bool) else None,
                                      deferred=tool.get("defer_loading") is True))  # fmt: skip
    return functions, web, fetch, search, code


def _web_search(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """Anthropic's web search tool as a Responses web_search tool the server runs (search only)."""
    filters = {key: tool[key] for key in ("allowed_domains", "blocked_domains") if tool.get(key) is not None}
    spec = {"type": "web_search", "external_web_access": False, "filters": filters or None,
            "user_location": tool.get("user_location"), "name": tool.get("name") or "web_search"}  # fmt: skip
    blocked = filters.get("blocked_domains")
    if blocked is not None and not (isinstance(blocked, list) and all(isinstance(d, str) for d in blocked)):
        raise APIError(400, "`blocked_domains` must be a list of domain names.", param=f"{param}.blocked_domains",
                       code="invalid_value")  # fmt: skip
    check_spec(spec, param)
    uses = tool.get("max_uses")
    if uses is not None and (not isinstance(uses, int) or isinstance(uses, bool) or uses < 1):
        raise APIError(400, "`max_uses` must be a positive integer.", param=f"{param}.max_uses", code="invalid_value")
    return {**spec, "max_uses": uses}


def _tool_choice(choice: dict[str, Any] | None, tools: list[FunctionTool], web: dict[str, Any] | None = None,
                 fetch: dict[str, Any] | None = None,
                 code: dict[str, Any] | None = None) -> tuple[ToolChoice, bool | None, str | None]:  # fmt: skip
    """The tool choice, parallel calls, and the server-run function it forces. `web`, `fetch`: the
    web search and web fetch server tools the server runs; naming one forces it (Claude Code's
    WebSearch tool asks so), which the pipeline points at the function's name. `code`: the code
    execution tool, whose functions (two of them) a choice naming it requires one of."""
    if choice is None:
        return "auto", None, None
    kind = choice.get("type")
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    if kind == "auto":
        return "auto", parallel, None
    if kind == "any":
        return "required", parallel, None
    if kind == "none":
        return "none", None, None
    if kind == "tool":
        name = choice.get("name")
        if any(tool.name == name for tool in tools):
            return NamedToolChoice(str(name)), parallel, None
        if web is not None and name == web.get("name"):
            return "required", parallel, SEARCH
        if fetch is not None and name == fetch.get("name"):
            return "required", parallel, FETCH
        if code is not None and name == code.get("name"):
            return "required", parallel, None
        raise APIError(400, f"tool_choice names `{name}`, which is not among the tools.", param="tool_choice",
                       code="invalid_value")  # fmt: skip
    raise APIError(400, f"Invalid tool_choice type: {kind!r}.", param="tool_choice", code="invalid_value")


def _thinking(thinking: dict[str, Any] | None, output: dict[str, Any] | None) -> tuple[str | None, bool]:
    """`thinking` (and `output_config.effort`) as the engine's reasoning effort, and whether to show it.

    `disabled` is effort `none`; `enabled` maps its budget (up to 4k tokens low, 16k medium,
    more high); `adaptive` and no `thinking` leave the engine's default. `output_config.effort`
    names the effort itself. Any `display` but `omitted` shows the text (Claude Code sends
    values newer than the SDK's, such as `updates`).
    """
    effort: str | None = None
    show = True
    if thinking is not None:
        kind = thinking.get("type")
        if kind == "disabled":
            effort = "none"
        elif kind == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
                raise APIError(400, "thinking.budget_tokens must be a positive integer.",
                               param="thinking.budget_tokens", code="invalid_value")  # fmt: skip
            effort = "low" if budget <= 4096 else "medium" if budget <= 16384 else "high"
        elif kind not in ("adaptive", "between_tools"):
            raise APIError(400, f"Invalid thinking type: {kind!r}.", param="thinking.type", code="invalid_value")
        show = thinking.get("display") != "omitted"
    requested = (output or {}).get("effort")
    if requested in ("low", "medium", "high", "xhigh", "max") and effort != "none":
        effort = requested
    return effort, show


# --- the history -------------------------------------------------------------------------


def _message(message: Any, sealer: Sealer, system: list[str], tools: dict[str, FunctionTool],
             uploads: list[tuple[str, TextPart]] | None) -> list[Message] | None:  # fmt: skip
    """One Anthropic message as canonical messages (a user turn's tool results become `tool`
    messages); None when nothing of it is usable. System text joins `system`; `tools`: the
    request's, by name (what a `tool_reference` names); `uploads` gathers the user's
    `container_upload` blocks (None: the request has no code execution tool to put them in)."""
    if not isinstance(message, dict):
        return None
    role, content = message.get("role"), message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return None
    if role in ("system", "developer"):  # newer Claude Code versions send these
        parts = _parts(content, "system")
        system.append("".join(part.text for part in parts if isinstance(part, TextPart)))
        return []
    if role == "user":
        return _user(content, tools, uploads)
    if role == "assistant":
        return _assistant(content, sealer, tools)
    return None


def _user(blocks: list[Any], tools: dict[str, FunctionTool], uploads: list[tuple[str, TextPart]] | None) -> list[Message]:
    """Tool results as `tool` messages, the other blocks as user messages between them, in order;
    a `container_upload` block as a note the route completes once its file is in the container."""
    out: list[Message] = []
    parts: list[Part] = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "container_upload":
            if uploads is not None and isinstance(block.get("file_id"), str) and block["file_id"]:
                note = TextPart("")
                uploads.append((block["file_id"], note))
                parts.append(note)
            else:
                log.warning("skipping a container_upload block: no code execution tool or no file_id")
            continue
        if isinstance(block, dict) and block.get("type") == "tool_result":
            result = _tool_result(block, tools)
            if result is not None:
                if parts:
                    out.append(Message("user", parts))
                    parts = []
                out.append(result)
            continue
        parts += _parts([block], "user")
    if parts:
        out.append(Message("user", parts))
    return out


def _tool_result(block: dict[str, Any], tools: dict[str, FunctionTool]) -> Message | None:
    """A tool result; the `tool_reference` blocks in it (a tool search's finds) are offered
    from then on, and the model reads which tools they are."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        log.warning("skipping a tool_result without tool_use_id")
        return None
    content = block.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    found = [str(b["tool_name"]) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_reference"
             and isinstance(b.get("tool_name"), str)]  # fmt: skip
    parts = _parts([b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_reference")], "tool_result")
    if found:
        parts.append(TextPart(("\n" if parts else "") + "\n".join(_reference(name, tools.get(name)) for name in found)))
    if block.get("is_error") is True:  # the canonical result has no error flag: the model reads it
        parts.insert(0, TextPart("Error: "))
    return Message("tool", parts, tool_call_id=call_id, tools_found=found)


def _reference(name: str, tool: FunctionTool | None) -> str:
    """A `tool_reference` as the model reads it: the tool it may call from now on."""
    if tool is None:
        return f"Tool {name} was found, but this request does not declare it."
    return found_tools([tool])


def _assistant(blocks: list[Any], sealer: Sealer, tools: dict[str, FunctionTool]) -> list[Message]:
    """An assistant turn; a web search the server ran in it (`server_tool_use`, then its
    `web_search_tool_result`), or an MCP call (`mcp_tool_use`, then its `mcp_tool_result`), splits
    it: the call ends one assistant message, its result follows as a tool message, and what the
    model wrote after it is the next assistant message. An MCP call is named by its tool's own
    name (the model knows it as `server__tool` only where two servers share a tool name). A tool
    search the server ran (`server_tool_use` named `tool_search_tool_*`, then its
    `tool_search_tool_result`) keeps the tools it found offered (`tools`: the request's, by name).
    A code call (`server_tool_use` named `bash_code_execution`, `text_editor_code_execution` or
    `code_execution`, then its result block) is the call and the text the model read
    (`code_execution.py`)."""
    out: list[Message] = []
    parts: list[Part] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    searches: dict[str, ToolCall] = {}
    """Server-run calls of the turn waiting for their result block (one without is left out)."""
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "server_tool_use" and (call := replayed_call(block)) is not None:
            searches[call.id] = call
        elif kind == "server_tool_use" and block.get("name") == "web_search" and isinstance(block.get("id"), str):
            query = (block.get("input") or {}).get("query") if isinstance(block.get("input"), dict) else None
            searches[block["id"]] = ToolCall(block["id"], SEARCH, json.dumps({"query": str(query or "")}, ensure_ascii=False))
        elif kind == "server_tool_use" and block.get("name") == "web_fetch" and isinstance(block.get("id"), str):
            url = (block.get("input") or {}).get("url") if isinstance(block.get("input"), dict) else None
            searches[block["id"]] = ToolCall(block["id"], FETCH, json.dumps({"url": str(url or "")}, ensure_ascii=False))
        elif kind == "server_tool_use" and block.get("name") in SEARCHES and isinstance(block.get("id"), str):
            query = (block.get("input") or {}).get("query") if isinstance(block.get("input"), dict) else None
            searches[block["id"]] = ToolCall(block["id"], block["name"], json.dumps({"query": str(query or "")},
                                                                                  ensure_ascii=False))  # fmt: skip
        elif kind == "mcp_tool_use" and isinstance(block.get("name"), str) and isinstance(block.get("id"), str):
            arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
            searches[block["id"]] = ToolCall(block["id"], block["name"], json.dumps(arguments, ensure_ascii=False))
        elif kind == "mcp_tool_listing":
            pass  # the servers are listed anew for each request
        elif kind == "tool_search_tool_result" and block.get("tool_use_id") in searches:
            calls.append(searches.pop(block["tool_use_id"]))
            out.append(Message("assistant", parts, "".join(reasoning) or None, calls))
            out.append(_search_found(block, tools))
            parts, reasoning, calls = [], [], []
        elif is_result(block) and block.get("tool_use_id") in searches:
            calls.append(searches.pop(block["tool_use_id"]))
            out.append(Message("assistant", parts, "".join(reasoning) or None, calls))
            out.append(Message("tool", [replayed_result(block, calls[-1])], tool_call_id=block["tool_use_id"]))
            parts, reasoning, calls = [], [], []
        elif (kind in ("web_search_tool_result", "web_fetch_tool_result", "mcp_tool_result")
              and block.get("tool_use_id") in searches):  # fmt: skip
            calls.append(searches.pop(block["tool_use_id"]))
            out.append(Message("assistant", parts, "".join(reasoning) or None, calls))
            result = (_search_results(block.get("content"), sealer) if kind == "web_search_tool_result"
                      else _fetched(block.get("content")) if kind == "web_fetch_tool_result"
                      else _mcp_result(block))  # fmt: skip
            out.append(Message("tool", [TextPart(result)], tool_call_id=block["tool_use_id"]))
            parts, reasoning, calls = [], [], []
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append(TextPart(block["text"]))
        elif kind in ("thinking", "redacted_thinking"):
            # The signature (`data` of a redacted block) holds the text sealed: with display
            # `omitted` the block's own text is empty. One that does not open is left out.
            sealed = block.get("signature" if kind == "thinking" else "data")
            text = sealer.open("reasoning", sealed) if isinstance(sealed, str) and sealed else None
            if text is None:
                log.warning("skipping a %s block whose signature is not this server's", kind)
            elif text:
                reasoning.append(text)
        elif kind == "tool_use" and isinstance(block.get("name"), str) and isinstance(block.get("id"), str):
            arguments = block.get("input", {})
            calls.append(ToolCall(block["id"], block["name"],
                                  arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)))  # fmt: skip
        else:
            log.warning("skipping an assistant block of type %r", kind)
    for call_id in searches:
        log.warning("skipping server-run call %s: the turn holds no result of it", call_id)
    if parts or reasoning or calls or not out:
        out.append(Message("assistant", parts, "".join(reasoning) or None, calls))
    return out


def _search_results(content: Any, sealer: Sealer) -> str:
    """A replayed web search's results as the model read them: each result's text is in its
    `encrypted_content`, sealed by this server (`api/messages/render.py`); a foreign one gives
    its title and URL only."""
    if isinstance(content, dict):
        return f"Error: the web search failed ({content.get('error_code', 'unavailable')})."
    blocks = []
    for position, result in enumerate(content if isinstance(content, list) else (), start=1):
        if not isinstance(result, dict):
            continue
        sealed = result.get("encrypted_content")
        text = sealer.open("web_search", sealed) if isinstance(sealed, str) and sealed else None
        blocks.append(f"[{position}] {result.get('title') or ''}\nURL: {result.get('url') or ''}" + (f"\n{text}" if text else ""))
    return "\n\n".join(blocks) or "No results."


def _search_found(block: dict[str, Any], tools: dict[str, FunctionTool]) -> Message:
    """A replayed tool search's result as the model read it, the tools it found offered again."""
    content = block.get("content") if isinstance(block.get("content"), dict) else {}
    if content.get("type") != "tool_search_tool_search_result":
        text = f"Error: the tool search failed ({content.get('error_code', 'unavailable')})."
        return Message("tool", [TextPart(text)], tool_call_id=block["tool_use_id"])
    references = content.get("tool_references") if isinstance(content.get("tool_references"), list) else []
    found = [str(ref["tool_name"]) for ref in references if isinstance(ref, dict) and isinstance(ref.get("tool_name"), str)]
    text = "\n".join(_reference(name, tools.get(name)) for name in found) or "No tools were found."
    return Message("tool", [TextPart(text)], tool_call_id=block["tool_use_id"], tools_found=found)


def _mcp_result(block: dict[str, Any]) -> str:
    """A replayed MCP call's result as the model read it (an error after `Error: `, as the tool
    loop gives it)."""
    content = block.get("content")
    parts = [{"text": content}] if isinstance(content, str) else content if isinstance(content, list) else []
    text = "\n".join(part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str))
    return f"Error: {text}" if block.get("is_error") is True else text


def _fetched(content: Any) -> str:
    """A replayed page fetch as the model read it: the page's title, URL and text (its
    `document`, text or PDF), or the error."""
    if not isinstance(content, dict) or content.get("type") != "web_fetch_result":
        code = content.get("error_code", "unavailable") if isinstance(content, dict) else "unavailable"
        return f"Error: the page could not be fetched ({code})."
    document = content.get("content") if isinstance(content.get("content"), dict) else {}
    page = _document({**document, "title": None})  # the title goes first, once
    text = page.text if isinstance(page, TextPart) else ""
    return f"{document.get('title') or content.get('url') or ''}\nURL: {content.get('url') or ''}\n\n{text}"


def _parts(blocks: Any, where: str) -> list[Part]:
    """Text, images and documents; anything else is skipped with a warning."""
    parts: list[Part] = []
    for block in blocks if isinstance(blocks, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(TextPart(block["text"]))
        elif kind == "image" and (url := _image_url(block.get("source"))):
            parts.append(ImagePart(url))
        elif kind == "document" and (document := _document(block)) is not None:
            parts.append(document)
        elif kind == "search_result" and isinstance(block.get("content"), list):
            parts += _parts(block["content"], where)
        else:
            log.warning("skipping a %s block of type %r", where, kind)
    return parts


def _image_url(source: Any) -> str | None:
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return source["url"]  # passed to the engine as given, never fetched here (outbound.py)
    return None


def _document(block: dict[str, Any]) -> Part | None:
    """A document's text: plain text as given, a PDF's text extracted (pypdf, as uploaded files),
    content blocks joined; a PDF that cannot be read is a note saying so (never an error: a
    replayed history holds it on every turn). A URL source is read by the attachments stage
    (`orchestration/attachments.py`); a file source (Anthropic's Files API) is not: None."""
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    kind = source.get("type")
    title = block.get("title") if isinstance(block.get("title"), str) and block.get("title") else None
    if kind == "url" and isinstance(source.get("url"), str) and source["url"]:
        return FilePart(filename=title, url=source["url"])
    text: str | None = None
    if kind == "text" and isinstance(source.get("data"), str):
        text = source["data"]
    elif kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            text = content
        else:
            text = "".join(part.text for part in _parts(content, "document") if isinstance(part, TextPart))
    elif kind == "base64" and source.get("media_type") == "application/pdf" and isinstance(source.get("data"), str):
        try:
            text = extract_text("document.pdf", base64.b64decode(source["data"], validate=True))
        except (binascii.Error, ValueError, ExtractionError) as exc:
            log.warning("a PDF document cannot be read: %s", exc)
            return TextPart(f"[document {title or 'document.pdf'}: a PDF whose text cannot be read]")
    if text is None:
        return None
    return TextPart(f"{title}\n\n{text}" if title else text)
