"""Responses tools -> the functions a chat model sees, and the way back.

`custom` tools (Codex's apply_patch) become a function with one string argument and come
back as `custom_tool_call` items; `namespace` tools are flattened so the model sees
every function, and calls are mapped back to their namespace. A `defer_loading` tool is
deferred until a `tool_search_output` finds it; a `tool_search` the client runs (Codex's) is
offered as a function whose calls come back as `tool_search_call` items; one the server runs
(`execution: "server"`) is the orchestrator's (`tools/tool_search.py`). The built-in tools the
client runs (`shell` with a local environment, `local_shell`, `apply_patch`, the computer tools)
are offered as functions whose calls come back as their typed items
(`orchestration/client_tools.py`); `code_interpreter` and the `shell` tool with a container
environment are the server's (`tools/code_execution.py`). Hosted tools that no component of this
server runs are dropped with a warning (web search without a configured provider, for one).
"""

from __future__ import annotations

import logging
from typing import Any

from ...canonical.conversation import FunctionTool, NamedToolChoice, ToolChoice
from ...canonical.errors import APIError
from ...canonical.server_tools import ACTIONS as WEB_FUNCTIONS
from ...canonical.server_tools import CODE_FUNCTIONS
from ...canonical.server_tools import NAMESPACE as WEB
from ...canonical.toolset import CUSTOM_INPUT, TOOL_SEARCH, ToolOrigin, ToolSet
from ...orchestration import client_tools

log = logging.getLogger(__name__)

HOSTED_TOOL_TYPES = frozenset({
    "file_search", "web_search", "web_search_2025_08_26", "web_search_preview",
    "web_search_preview_2025_03_11", "computer", "computer_use_preview", "mcp", "code_interpreter",
    "programmatic_tool_calling", "image_generation", "local_shell", "shell", "tool_search", "apply_patch",
})  # fmt: skip
"""Tool types of the API that are not client functions (echoed in the Response, not offered)."""
WEB_SEARCH_TOOL_TYPES = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview",
                                   "web_search_preview_2025_03_11"})  # fmt: skip
SERVED_TOOL_TYPES = frozenset({"file_search", "mcp", "tool_search", "code_interpreter", "shell"})
"""Hosted tools the orchestrator runs itself (`tools/`); web search too when a provider is configured."""


def translate_tools(tools: list[Any], web_search: bool = False) -> ToolSet:
    """The functions the model sees for the client's tools (the orchestrator adds the ones it serves);
    `web_search`: whether the server has a search engine to run web search tools with."""
    toolset = ToolSet(declare=declared)
    entries: list[tuple[ToolOrigin, FunctionTool]] = []
    for position, tool in enumerate(tools):
        param = f"tools[{position}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise APIError(400, "Each tool must be an object with a `type`.", param=param, code="invalid_value")
        kind = tool["type"]
        if kind in ("function", "custom"):
            entries += declared(tool, param)
            toolset.echo.append(_echo(tool))
        elif kind == "namespace":
            entries += declared(tool, param)
            toolset.echo.append(
                {**tool, "description": tool.get("description", ""), "tools": [_echo(m) for m in tool["tools"]]}
            )
        elif kind == "tool_search" and tool.get("execution") == "client":
            entries.append((ToolOrigin("tool_search", TOOL_SEARCH), _search_function(tool)))
            toolset.echo.append(tool)
        elif kind in client_tools.FUNCTIONS and client_tools.client_run(tool):
            entries.append((ToolOrigin("builtin", kind), client_tools.offer(tool)))
            toolset.echo.append(tool)
        elif kind in HOSTED_TOOL_TYPES:
            if kind in WEB_SEARCH_TOOL_TYPES and not web_search:
                log.warning("dropping hosted tool %r: no web_search_provider is configured (docs/web-search.md)", kind)
            elif kind not in SERVED_TOOL_TYPES and kind not in WEB_SEARCH_TOOL_TYPES:
                log.warning("dropping hosted tool %r: no component of this server runs it", kind)
            toolset.echo.append(tool)
        else:
            log.warning("dropping tool of unknown type %r", kind)
    toolset.add(entries)
    return toolset


def translate_tool_choice(
    choice: Any, toolset: ToolSet, web_search: bool = False, code: frozenset[str] = frozenset()
) -> ToolChoice:
    """The canonical tool choice; `allowed_tools` limits the tools offered (`toolset.allowed`).
    A web search forced (`{"type": "web_search"}`), or a code tool the server runs (`code`:
    `code_interpreter`, `shell`), is `required` here; the orchestrator names the function once
    it is offered (`ServerToolSpecs.forced`)."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice or "auto"
    if not isinstance(choice, dict):
        raise APIError(400, f"Invalid tool_choice: {choice!r}.", param="tool_choice", code="invalid_value")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name = choice.get("name")
        model_name = toolset.model_name(str(name), choice.get("namespace"))
        if model_name not in toolset.origins:
            raise APIError(400, f"tool_choice names `{name}`, which is not among the tools.", param="tool_choice", code="invalid_value")
        return NamedToolChoice(model_name)
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise APIError(400, "allowed_tools mode must be `auto` or `required`.", param="tool_choice.mode", code="invalid_value")
        listed = [tool for tool in choice.get("tools") or () if isinstance(tool, dict)]
        toolset.allowed = frozenset(
            toolset.model_name(str(tool.get("name")), tool.get("namespace"))
            for tool in listed
            if tool.get("type") in ("function", "custom")
        ) | {name for tool in listed if (name := _builtin(toolset, tool.get("type")))}
        if web_search and any(tool.get("type") in WEB_SEARCH_TOOL_TYPES for tool in listed):
            # The web functions are named once the orchestrator adds them: under either name they may get.
            toolset.allowed |= {name for function in WEB_FUNCTIONS for name in (function, f"{WEB}__{function}")}
        toolset.allowed |= {CODE_FUNCTIONS["python" if tool.get("type") == "code_interpreter" else "shell"]
                            for tool in listed if tool.get("type") in code}  # fmt: skip
        return mode
    if kind in WEB_SEARCH_TOOL_TYPES and web_search or kind in code:
        return "required"
    if name := _builtin(toolset, kind):
        return NamedToolChoice(name)
    raise APIError(
        400,
        f"tool_choice of type `{kind}` cannot be honoured: no component of this server runs that tool.",
        param="tool_choice",
        code="invalid_value",
    )


def _builtin(toolset: ToolSet, kind: Any) -> str | None:
    """The model's name for the client-run built-in tool of type `kind` the request declares
    (`computer_use`: either computer tool), if it declares one."""
    kinds = ("computer", "computer_use_preview") if kind in ("computer", "computer_use_preview", "computer_use") else (kind,)
    return next((name for name, origin in toolset.origins.items() if origin.kind == "builtin" and origin.name in kinds), None)


def declared(tool: Any, param: str = "tool") -> list[tuple[ToolOrigin, FunctionTool]]:
    """A function, custom or namespace tool as the functions the model sees (its mistakes 400s), a
    namespace's members deferred each by its own `defer_loading`
    (https://developers.openai.com/api/docs/guides/tools-tool-search). Also what a
    `tool_search_output` brings."""
    if not isinstance(tool, dict) or tool.get("type") not in ("function", "custom", "namespace"):
        raise APIError(400, "Expected a function, custom or namespace tool.", param=param, code="invalid_value")
    _require_name(tool, param)
    if tool["type"] != "namespace":
        return [(ToolOrigin(tool["type"], tool["name"]), _function(tool["name"], tool))]
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise APIError(400, "A namespace tool needs a `tools` array.", param=f"{param}.tools", code="invalid_value")
    entries = []
    for index, member in enumerate(inner):
        member_param = f"{param}.tools[{index}]"
        if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
            raise APIError(400, "Namespace members must be function or custom tools.", param=member_param, code="invalid_value")
        _require_name(member, member_param)
        entries.append((ToolOrigin(member["type"], member["name"], tool["name"]), _function(member["name"], member)))
    return entries


def _search_function(tool: dict[str, Any]) -> FunctionTool:
    """The client's tool search as a function: its own description and parameters when it gives
    them (Codex does), else a query and a limit, the arguments of a `tool_search_call`
    (https://developers.openai.com/api/docs/guides/tools-tool-search)."""
    parameters = tool.get("parameters")
    if not isinstance(parameters, dict):
        parameters = {"type": "object", "properties": {
            "query": {"type": "string", "description": "What the tools to find should do."},
            "limit": {"type": "integer", "description": "The most tools to find."}}, "required": ["query"]}  # fmt: skip
    description = tool.get("description")
    return FunctionTool(TOOL_SEARCH, description if isinstance(description, str) and description else
                        "Search the deferred tools; the tools found become callable.", parameters)  # fmt: skip


def _require_name(tool: dict[str, Any], param: str) -> None:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise APIError(400, f"Missing required parameter: '{param}.name'.", param=f"{param}.name", code="missing_required_parameter")


def _function(name: str, tool: dict[str, Any]) -> FunctionTool:
    deferred = tool.get("defer_loading") is True
    if tool["type"] == "function":
        return FunctionTool(name, tool.get("description"), tool.get("parameters"), tool.get("strict"), deferred)
    description = tool.get("description") or ""
    form = tool.get("format") or {}
    if form.get("type") == "grammar" and form.get("definition"):
        description += (
            f"\n\nPass the whole input as the `{CUSTOM_INPUT}` string. It must follow this "
            f"{form.get('syntax', '')} grammar:\n{form['definition']}"
        )
    parameters = {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": "The raw input of the tool."}},
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }
    return FunctionTool(name, description.strip() or None, parameters, None, deferred)


def _echo(tool: dict[str, Any]) -> dict[str, Any]:
    if tool["type"] == "function":
        return {"description": None, "parameters": None, "strict": None, **tool}
    return tool
