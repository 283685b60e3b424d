"""The `mcp` tool: a remote MCP server's tools offered to the model, run by the server.

Tools are listed once per conversation chain: a listing already in the history (an
`mcp_list_tools` item) is reused. Calls that need the user's approval end the response
with an `mcp_approval_request`; the next request's `mcp_approval_response` runs or
declines them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..canonical.conversation import FunctionTool
from ..canonical.ids import new_id
from ..canonical.toolset import ToolOrigin
from ..operations import tracing
from ..tls import client_context
from . import ServerTools, ToolOutcome
from .outbound import UrlPolicy

log = logging.getLogger(__name__)

TIMEOUT = 60.0


class McpServer:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.label = str(spec["server_label"])
        self.url = str(spec.get("server_url") or "")
        self.headers = {str(k): str(v) for k, v in (spec.get("headers") or {}).items()}
        if spec.get("authorization"):
            self.headers["Authorization"] = f"Bearer {spec['authorization']}"
        self.allowed = _names(spec.get("allowed_tools"))
        self.denied = _names(spec.get("denied_tools")) or set()
        self.approval = spec.get("require_approval", "always")

    def needs_approval(self, tool: str) -> bool:
        policy = self.approval
        if isinstance(policy, str):
            return policy != "never"
        if not isinstance(policy, dict):
            return True
        if tool in ((policy.get("never") or {}).get("tool_names") or ()):
            return False
        if tool in ((policy.get("always") or {}).get("tool_names") or ()):
            return True
        return "never" not in policy  # named in neither list: approval unless a never-list was given

    def client(self) -> Client:
        if self.url.rstrip("/").endswith("/sse"):
            return Client(sse_client(self.url, headers=self.headers, timeout=TIMEOUT))
        http = httpx2.AsyncClient(headers=self.headers, timeout=TIMEOUT, verify=client_context())
        return Client(streamable_http_client(self.url, http_client=http))

    async def listing(self) -> dict[str, Any]:
        """A fresh `mcp_list_tools` item (with `error` set when the server could not be listed)."""
        item: dict[str, Any] = {"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": self.label,
                                "tools": [], "error": None}  # fmt: skip
        try:
            async with self.client() as session:
                with tracing.span("mcp tools/list", {"mcp.method.name": "tools/list", "server.label": self.label}):
                    listed = await session.list_tools()
        except Exception as exc:  # any transport or protocol failure: the response goes on without them  # noqa: BLE001
            log.warning("MCP server %s (%s) could not be listed: %r", self.label, self.url, exc)
            item["error"] = f"Could not list the tools of {self.url}: {exc}"
            return item
        item["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema,
             "annotations": tool.annotations.model_dump(exclude_none=True) if tool.annotations else None}
            for tool in listed.tools
        ]  # fmt: skip
        return item

    async def call(self, tool: str, arguments: str) -> ToolOutcome:
        """Run one tool; a failure is an outcome (the model hears of it), with the item's `error` in `data`."""
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return _failure(f"The arguments are not valid JSON: {arguments[:200]}", code=-32602)
        try:
            async with self.client() as session:
                with tracing.span(f"execute_tool {tool}", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                                           "mcp.method.name": "tools/call", "server.label": self.label}):  # fmt: skip
                    result = await session.call_tool(tool, parsed if isinstance(parsed, dict) else {})
        except MCPError as exc:
            return _failure(f"Calling {tool} failed: {exc}", code=exc.error.code)
        except httpx2.HTTPStatusError as exc:
            return _failure(f"Calling {tool} failed: {exc}", code=exc.response.status_code, kind="http_error")
        except Exception as exc:  # any transport failure: the model hears of it and goes on  # noqa: BLE001
            log.warning("MCP call %s.%s failed: %r", self.label, tool, exc)
            return _failure(f"Calling {tool} failed: {exc}")
        text = "\n".join(getattr(part, "text", "") or json.dumps(part.model_dump()) for part in result.content)
        if result.is_error:
            content = [part.model_dump(mode="json", exclude_none=True) for part in result.content]
            error = {"type": "mcp_tool_execution_error", "content": content}
            return ToolOutcome("", error=text or f"{tool} reported an error", data={"error": error})
        return ToolOutcome(text)


async def add_mcp_servers(
    tools: ServerTools, specs: list[tuple[int, dict[str, Any]]], history: list[dict[str, Any]], urls: UrlPolicy
) -> dict[str, McpServer]:
    """Offer each MCP server's tools (`specs`: the request's mcp tools with their positions in
    `tools`, for errors), those `allowed_tools` names (all when not given) less those
    `denied_tools` names; returns the servers by label (for approvals)."""
    servers: dict[str, McpServer] = {}
    for position, spec in specs:
        server = servers[str(spec["server_label"])] = McpServer(spec)
        await urls.check(server.url, f"tools[{position}].server_url")
        listing = _last_listing(history, server.label)
        if listing is None:
            listing = await server.listing()
            tools.ready_items.append(listing)
        for tool in listing["tools"]:
            if (server.allowed is not None and tool["name"] not in server.allowed) or tool["name"] in server.denied:
                continue
            origin = ToolOrigin("mcp", tool["name"], server.label, server.needs_approval(tool["name"]))
            function = FunctionTool(tool["name"], tool.get("description"), tool.get("input_schema"))
            tools.add(origin, function, lambda arguments, s=server, name=tool["name"]: s.call(name, arguments))
    return servers


def _failure(message: str, code: int = -32603, kind: str = "mcp_protocol_error") -> ToolOutcome:
    return ToolOutcome("", error=message, data={"error": call_error(message, code, kind)})


def call_error(message: str, code: int = -32603, kind: str = "mcp_protocol_error") -> dict[str, Any]:
    """The `error` of a failed `mcp_call` item (-32603: JSON-RPC's internal error)."""
    return {"type": kind, "code": code, "message": message}


def _last_listing(history: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    for item in reversed(history):
        if item.get("type") == "mcp_list_tools" and item.get("server_label") == label and not item.get("error"):
            return item
    return None


def _names(spec: Any) -> set[str] | None:
    """Tool names given as a list or as `{"tool_names": [...]}`; None when not given."""
    if isinstance(spec, list):
        return {str(name) for name in spec}
    if isinstance(spec, dict) and isinstance(spec.get("tool_names"), list):
        return {str(name) for name in spec["tool_names"]}
    return None
