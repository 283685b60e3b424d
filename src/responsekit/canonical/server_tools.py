"""The server-run tools a request asks for, in no protocol's shape, and the names the model
knows the web tools by.

A frontend translates its protocol's hosted tools (Responses' `web_search`, `file_search` and
`mcp`, Chat Completions' `web_search_options`, the Messages API's `web_search_*`, `web_fetch_*`,
`tool_search_tool_*` and MCP connector, Gemini's `googleSearch` and `urlContext`) into `ServerToolSpecs`; the
pipeline (`orchestration/pipeline.py`) serves them the same way for every protocol.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import APIError

NAMESPACE = "web"
"""The namespace of the web functions, so that a client's function of the same name keeps it."""
SEARCH, OPEN, FIND = "web_search", "web_open_page", "web_find_in_page"
FETCH = "web_fetch"
"""Anthropic's `web_fetch_*` server tool as one function (`tools/web/fetch_tool.py`)."""
ACTIONS = {SEARCH: "search", OPEN: "open_page", FIND: "find_in_page"}
"""Web function -> the `type` of its `action` in OpenAI's `web_search_call` item."""
FUNCTIONS = {action: name for name, action in ACTIONS.items()}
CITATION = re.compile(r"\[(\d{1,4})\]")
"""How the model cites a search result it read: `[n]`, n as the result was numbered (the
server-run tools ask for it); each frontend turns these into its protocol's citations."""
ToolSearchMode = Literal["regex", "bm25"]
TOOL_SEARCHES: dict[ToolSearchMode, str] = {"regex": "tool_search_tool_regex", "bm25": "tool_search_tool_bm25"}
"""The server-run tool search (`tools/tool_search.py`) -> the function it is offered as, which
names its `server_tool_use` blocks on the Messages API."""
MAX_TOOL_SEARCHES = 10
"""Tool searches one answer may run beside other server tools' budgets (`max_tool_calls`)."""
CONTEXT_SIZES = ("low", "medium", "high")
"""The values of `search_context_size`."""
CodeFunction = Literal["python", "shell", "bash", "text_editor"]
CODE_FUNCTIONS: dict[CodeFunction, str] = {"python": "python", "shell": "shell", "bash": "bash_code_execution",
                                           "text_editor": "text_editor_code_execution"}  # fmt: skip
"""Each code function (`tools/code_execution.py`) -> the name the model calls it by: Responses'
`code_interpreter` offers `python`, its hosted `shell` tool `shell`, the Messages API's
`code_execution_*` the two names Anthropic's `server_tool_use` blocks carry."""


@dataclass(slots=True)
class CodeSpec:
    """Code the server runs in one container for a request (`tools/code_execution.py`).

    `container` is a container id (`cntr_…`, the key's and live, else the request's 404 or 400)
    or an auto spec (`{"type": "auto" | "container_auto", "file_ids", "memory_limit",
    "network_policy"}`): a container made for the request, unless one the conversation already
    used is still live (`reuse`). It is resolved once, when the request's tools are prepared.
    """

    container: str | dict[str, Any]
    functions: tuple[CodeFunction, ...]
    param: str = "container"
    """Where the request named the container, for its errors (`tools[0].container`)."""
    reuse: bool = True
    """An auto spec takes the live container of the conversation's last code call, as OpenAI's
    `auto` mode does (https://platform.openai.com/docs/guides/tools-code-interpreter#auto-mode)."""


@dataclass(slots=True)
class ServerToolSpecs:
    """The server-run tools one request asked for.

    Each spec keeps the keys the tool reads: a web search's `search_context_size`,
    `filters.allowed_domains`, `blocked_domains`, `user_location`, `external_web_access` and
    `max_uses`; a page fetch's (`check_fetch_spec`); an MCP server's `server_label`,
    `server_url`, `authorization`, `headers`, `allowed_tools` (the only tools offered; all when
    absent), `denied_tools` (tools never offered: the Messages API's denylist form) and
    `require_approval`.
    """

    web_search: dict[str, Any] | None = None
    web_fetch: dict[str, Any] | None = None
    file_search: tuple[int, dict[str, Any]] | None = None
    """The `file_search` tool and its position among the request's tools."""
    mcp: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """The MCP servers, each with its position among the request's tools (the Messages API:
    among its `mcp_servers`)."""
    tool_search: ToolSearchMode | None = None
    """The tool search the server runs over the request's deferred tools (`tools/tool_search.py`)."""
    forced: str | None = None
    """The server function the tool choice forces (`SEARCH`, `FETCH`, or a `CodeFunction`):
    the first generation must call it."""
    max_tool_calls: int | None = None
    """Server-run calls one answer may make before the model must answer without tools."""
    code: list[CodeSpec] = field(default_factory=list)
    """Code run in containers: Responses' `code_interpreter` and hosted `shell`, the Messages
    API's `code_execution_*`."""

    def __bool__(self) -> bool:
        return bool(self.web_search or self.web_fetch or self.file_search or self.mcp or self.tool_search
                    or self.code)


def check_spec(spec: dict[str, Any], param: str) -> None:
    """Refuse (400) a web search spec whose options the server reads have the wrong shape."""

    def refuse(key: str, message: str) -> APIError:
        return APIError(400, message, param=f"{param}.{key}", code="invalid_value")

    size = spec.get("search_context_size")
    if size is not None and size not in CONTEXT_SIZES:
        raise refuse("search_context_size", "`search_context_size` must be `low`, `medium` or `high`.")
    filters = spec.get("filters")
    if filters is not None and not isinstance(filters, dict):
        raise refuse("filters", "`filters` must be an object.")
    domains = (filters or {}).get("allowed_domains")
    if domains is not None and not (isinstance(domains, list) and all(isinstance(d, str) for d in domains)):
        raise refuse("filters.allowed_domains", "`allowed_domains` must be a list of domain names.")
    location = spec.get("user_location")
    if location is not None and not (isinstance(location, dict) and
                                     all(isinstance(v, str) or v is None for v in location.values())):  # fmt: skip
        raise refuse("user_location", "`user_location` must be an object of strings.")
    access = spec.get("external_web_access")
    if access is not None and not isinstance(access, bool):
        raise refuse("external_web_access", "`external_web_access` must be a boolean.")


def check_fetch_spec(tool: dict[str, Any], param: str) -> dict[str, Any]:
    """A page-fetch tool (Anthropic's `web_fetch_*` shape) as the spec the pipeline serves; a
    malformed option is a 400."""

    def refuse(key: str, message: str) -> APIError:
        return APIError(400, message, param=f"{param}.{key}", code="invalid_value")

    for key in ("allowed_domains", "blocked_domains"):
        domains = tool.get(key)
        if domains is not None and not (isinstance(domains, list) and all(isinstance(d, str) for d in domains)):
            raise refuse(key, f"`{key}` must be a list of domain names.")
    if tool.get("allowed_domains") and tool.get("blocked_domains"):
        raise refuse("blocked_domains", "Give `allowed_domains` or `blocked_domains`, not both.")
    for key in ("max_uses", "max_content_tokens"):
        value = tool.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise refuse(key, f"`{key}` must be a positive integer.")
    citations = tool.get("citations")
    if citations is not None and not (isinstance(citations, dict) and isinstance(citations.get("enabled", False), bool)):
        raise refuse("citations", "`citations` must be an object such as {\"enabled\": true}.")
    return {"type": "web_fetch", "name": tool.get("name") or FETCH,
            **{key: tool.get(key) for key in ("allowed_domains", "blocked_domains", "max_uses",
                                              "max_content_tokens", "citations")}}  # fmt: skip


def action_of(function: str, arguments: str) -> dict[str, Any]:
    """The `action` of a `web_search_call` item for a call of `function` with `arguments`."""
    value = arguments_of(arguments)
    kind = ACTIONS.get(function, "search")
    if kind == "search":
        query = value.get("query")
        queries = value.get("queries") if isinstance(value.get("queries"), list) else None
        query = query if isinstance(query, str) else (str(queries[0]) if queries else "")
        return {"type": "search", "query": query, "queries": [str(q) for q in queries] if queries else [query]}
    url = value.get("url") if isinstance(value.get("url"), str) else ""
    if kind == "open_page":
        return {"type": "open_page", "url": url}
    pattern = value.get("pattern") if isinstance(value.get("pattern"), str) else ""
    return {"type": "find_in_page", "url": url, "pattern": pattern}


def call_of(action: Any) -> tuple[str, str]:
    """The function and arguments a replayed `action` stands for (the way back of `action_of`)."""
    action = action if isinstance(action, dict) else {}
    kind = action.get("type") if action.get("type") in FUNCTIONS else "search"
    if kind == "search":
        query = action.get("query") or next(iter(action.get("queries") or ()), "")
        return SEARCH, json.dumps({"query": str(query)}, ensure_ascii=False)
    if kind == "open_page":
        return OPEN, json.dumps({"url": str(action.get("url") or "")}, ensure_ascii=False)
    return FIND, json.dumps({"url": str(action.get("url") or ""), "pattern": str(action.get("pattern") or "")},
                            ensure_ascii=False)  # fmt: skip


def arguments_of(arguments: str) -> dict[str, Any]:
    """A web call's arguments as an object; a bare text is taken for a query."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {"query": arguments.strip()} if arguments.strip() else {}
    return value if isinstance(value, dict) else {}


# --- the code functions' arguments (`tools/code_execution.py` runs them; renderers show them) ---


class BadInput(ValueError):
    """The model's arguments cannot be read as the code function's input (`invalid_tool_input`)."""


_FENCE = re.compile(r"^```[\w+-]*\n(.*?)\n?```\s*$", re.DOTALL)


def python_code(arguments: str) -> str:
    """The code of a `python` call: `{"code": …}`, or the arguments themselves when they are no
    JSON object (a small model's raw code), a Markdown fence taken off."""
    value = _code_json(arguments)
    code = value.get("code", value.get("input")) if isinstance(value, dict) else value
    if not isinstance(code, str) or not code.strip():
        raise BadInput("`code` must be the Python code to run")
    fenced = _FENCE.match(code.strip())
    return fenced.group(1) if fenced else code


def shell_action(arguments: str) -> tuple[list[str], int | None, int | None]:
    """A `shell` call's command lines, time limit (ms) and output bound (characters); one
    command line given as a string is a list of one."""
    value = _code_json(arguments)
    if isinstance(value, str):
        value = {"commands": [value]}
    if not isinstance(value, dict):
        raise BadInput("the arguments must be an object with `commands`")
    commands = value.get("commands", value.get("command", value.get("cmd")))
    if isinstance(commands, str):
        commands = [commands]
    if (
        not isinstance(commands, list)
        or not commands
        or not all(isinstance(c, str) and c.strip() for c in commands)
    ):
        raise BadInput("`commands` must be a list of command lines")
    return commands, _positive(value.get("timeout_ms")), _positive(value.get("max_output_length"))


def _code_json(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
