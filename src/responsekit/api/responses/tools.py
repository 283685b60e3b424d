"""Responses tools -> the functions a chat model sees, and the way back.

`custom` tools (Codex's apply_patch) become a function with one string argument and come
back as `custom_tool_call` items; `namespace` tools are flattened so the model sees
every function, and calls are mapped back to their namespace. Hosted tools that no
component of this server runs are dropped with a warning (web search without a
configured provider, for one).
"""

from __future__ import annotations

import logging
from typing import Any

from ...canonical.conversation import FunctionTool, NamedToolChoice, ToolChoice
from ...canonical.errors import APIError
from ...canonical.server_tools import ACTIONS as WEB_FUNCTIONS
from ...canonical.server_tools import NAMESPACE as WEB
from ...canonical.toolset import CUSTOM_INPUT, ToolOrigin, ToolSet

log = logging.getLogger(__name__)

HOSTED_TOOL_TYPES = frozenset({
    "file_search", "web_search", "web_search_2025_08_26", "web_search_preview",
    "web_search_preview_2025_03_11", "computer", "computer_use_preview", "mcp", "code_interpreter",
    "programmatic_tool_calling", "image_generation", "local_shell", "shell", "tool_search", "apply_patch",
})  # fmt: skip
"""Tool types of the API that are not client functions (echoed in the Response, not offered)."""
WEB_SEARCH_TOOL_TYPES = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview",
                                   "web_search_preview_2025_03_11"})  # fmt: skip
SERVED_TOOL_TYPES = frozenset({"file_search", "mcp"})
"""Hosted tools the orchestrator runs itself (`tools/`); web search too when a provider is configured."""


def translate_tools(tools: list[Any], web_search: bool = False) -> ToolSet:
    """The functions the model sees for the client's tools (the orchestrator adds the ones it serves);
    `web_search`: whether the server has a search engine to run web search tools with."""
    toolset = ToolSet()
    entries: list[tuple[ToolOrigin, FunctionTool]] = []
    for position, tool in enumerate(tools):
        param = f"tools[{position}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise APIError(400, "Each tool must be an object with a `type`.", param=param, code="invalid_value")
        kind = tool["type"]
        if kind in ("function", "custom"):
            _require_name(tool, param)
            entries.append((ToolOrigin(kind, tool["name"]), _function(tool["name"], tool)))
            toolset.echo.append(_echo(tool))
        elif kind == "namespace":
            _require_name(tool, param)
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise APIError(400, "A namespace tool needs a `tools` array.", param=f"{param}.tools", code="invalid_value")
            for index, member in enumerate(inner):
                member_param = f"{param}.tools[{index}]"
                if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
                    raise APIError(400, "Namespace members must be function or custom tools.", param=member_param, code="invalid_value")
                _require_name(member, member_param)
                origin = ToolOrigin(member["type"], member["name"], tool["name"])
                entries.append((origin, _function(member["name"], member)))
            toolset.echo.append(
                {**tool, "description": tool.get("description", ""), "tools": [_echo(m) for m in inner]}
            )
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


def translate_tool_choice(choice: Any, toolset: ToolSet, web_search: bool = False) -> ToolChoice:
    """The canonical tool choice; `allowed_tools` limits the tools offered (`toolset.allowed`).
    A web search forced (`{"type": "web_search"}`) is `required` here; the orchestrator names
    the search function once it is offered (`ServerToolSpecs.forced`)."""
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
        )
        if web_search and any(tool.get("type") in WEB_SEARCH_TOOL_TYPES for tool in listed):
            # The web functions are named once the orchestrator adds them: under either name they may get.
            toolset.allowed |= {name for function in WEB_FUNCTIONS for name in (function, f"{WEB}__{function}")}
        return mode
    if kind in WEB_SEARCH_TOOL_TYPES and web_search:
        return "required"
    raise APIError(
        400,
        f"tool_choice of type `{kind}` cannot be honoured: no component of this server runs that tool.",
        param="tool_choice",
        code="invalid_value",
    )


def _require_name(tool: dict[str, Any], param: str) -> None:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise APIError(400, f"Missing required parameter: '{param}.name'.", param=f"{param}.name", code="missing_required_parameter")


def _function(name: str, tool: dict[str, Any]) -> FunctionTool:
    if tool["type"] == "function":
        return FunctionTool(name, tool.get("description"), tool.get("parameters"), tool.get("strict"))
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
    return FunctionTool(name, description.strip() or None, parameters, None)


def _echo(tool: dict[str, Any]) -> dict[str, Any]:
    if tool["type"] == "function":
        return {"description": None, "parameters": None, "strict": None, **tool}
    return tool
