"""Anthropic's MCP connector: a request's `mcp_servers` and `mcp_toolset` tools as the MCP
servers the pipeline serves (`ServerToolSpecs.mcp`, listed and called by `tools/mcp.py`).

Two forms are read, whatever `anthropic-beta` says:

- the current one (`mcp-client-2025-11-20`): each server of `mcp_servers` (`type: "url"`,
  `url`, `name`, `authorization_token`) is referenced by exactly one `mcp_toolset` tool, whose
  `default_config.enabled` and per-tool `configs` say which of its tools the model is offered:
  all (the default), an allowlist (`default_config: {"enabled": false}`, some enabled in
  `configs`) or a denylist (some disabled in `configs`);
- the deprecated one (`mcp-client-2025-04-04`): no toolset, the server's own
  `tool_configuration` (`enabled`, `allowed_tools`); all its tools without one.

A request with toolsets may still hold a server in the older form (it has `tool_configuration`);
a server in neither is a 400, as are a toolset naming no defined server, a server referenced
twice, two servers of one name and options of the wrong shape. `defer_loading` is accepted and
the tools are offered from the start (no tool search runs here), as deferred client tools are.
The connector has no approvals: the server runs every call the model makes (`require_approval:
"never"`). The URL is checked by the server's URL policy when the tools are listed (a private
address is a 400 unless `allowed_hosts` lets it through); `https://`, which Anthropic requires,
is not (a gateway's MCP servers may be on its own network).
"""

from __future__ import annotations

from typing import Any

from ...canonical.errors import APIError

MAX_MCP_CALLS = 20
"""MCP calls the server runs for one answer before the model must answer without tools.
Anthropic documents no bound; an open model that keeps calling must not loop forever (Chat
Completions bounds its web searches the same way). It adds to the web tools' `max_uses`."""


def _refuse(param: str, message: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_value")


def mcp_specs(servers: Any, toolsets: list[tuple[int, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The MCP servers the model gets tools of, each with its position in `mcp_servers`, as
    `tools/mcp.py` reads them; `toolsets`: the `mcp_toolset` tools with their positions in `tools`."""
    if servers is None:
        servers = []
    if not isinstance(servers, list):
        raise _refuse("mcp_servers", "`mcp_servers` must be a list of MCP server definitions.")
    defined: dict[str, tuple[int, dict[str, Any]]] = {}
    for position, server in enumerate(servers):
        name = _server(server, f"mcp_servers.{position}")
        if name in defined:
            raise _refuse(f"mcp_servers.{position}.name", f"MCP server names must be unique: `{name}` is given twice.")
        defined[name] = (position, server)
    configured: dict[str, tuple[bool, dict[str, bool]]] = {}
    """Server name -> its toolset's default `enabled`, and the tools its `configs` enable or disable."""
    for position, toolset in toolsets:
        param = f"tools.{position}"
        name = toolset.get("mcp_server_name") if isinstance(toolset, dict) else None
        if not isinstance(name, str) or name not in defined:
            raise _refuse(f"{param}.mcp_server_name", f"The mcp_toolset names the MCP server `{name}`, which is not "
                          "among `mcp_servers`.")  # fmt: skip
        if name in configured:
            raise _refuse(param, f"The MCP server `{name}` is referenced by more than one mcp_toolset.")
        configured[name] = _toolset(toolset, param)
    specs = []
    for name, (position, server) in defined.items():
        spec: dict[str, Any] = {"server_label": name, "server_url": server["url"],
                                "authorization": server.get("authorization_token"), "require_approval": "never"}  # fmt: skip
        toolset = configured.get(name)
        if toolset is not None:
            default, enabled = toolset
            if default:
                spec["denied_tools"] = sorted(tool for tool, on in enabled.items() if not on)
            else:
                spec["allowed_tools"] = sorted(tool for tool, on in enabled.items() if on)
        elif server.get("tool_configuration") is not None or not toolsets:
            configuration = server.get("tool_configuration") or {}
            if configuration.get("enabled") is False:
                continue
            if configuration.get("allowed_tools") is not None:
                spec["allowed_tools"] = list(configuration["allowed_tools"])
        else:
            raise _refuse(f"mcp_servers.{position}", f"The MCP server `{name}` is not referenced by an mcp_toolset "
                          "in `tools`.")  # fmt: skip
        if spec.get("allowed_tools") == []:
            continue  # nothing of it is offered: not even listed
        specs.append((position, spec))
    return specs


def _server(server: Any, param: str) -> str:
    """Check one server definition; its name."""
    if not isinstance(server, dict):
        raise _refuse(param, "Each MCP server must be an object.")
    if server.get("type") != "url":
        raise _refuse(f"{param}.type", "An MCP server's `type` must be `url`.")
    for key in ("url", "name"):
        if not isinstance(server.get(key), str) or not server[key]:
            raise _refuse(f"{param}.{key}", f"Each MCP server needs a `{key}` string.")
    token = server.get("authorization_token")
    if token is not None and not isinstance(token, str):
        raise _refuse(f"{param}.authorization_token", "`authorization_token` must be a string.")
    configuration = server.get("tool_configuration")
    if configuration is not None:
        if not isinstance(configuration, dict):
            raise _refuse(f"{param}.tool_configuration", "`tool_configuration` must be an object.")
        if configuration.get("enabled") is not None and not isinstance(configuration["enabled"], bool):
            raise _refuse(f"{param}.tool_configuration.enabled", "`enabled` must be a boolean.")
        allowed = configuration.get("allowed_tools")
        if allowed is not None and not (isinstance(allowed, list) and all(isinstance(name, str) for name in allowed)):
            raise _refuse(f"{param}.tool_configuration.allowed_tools", "`allowed_tools` must be a list of tool names.")
    return str(server["name"])


def _toolset(toolset: dict[str, Any], param: str) -> tuple[bool, dict[str, bool]]:
    """A toolset's default `enabled`, and that of each tool whose entry in `configs` says."""
    default = _config(toolset.get("default_config"), f"{param}.default_config")
    configs = toolset.get("configs")
    if configs is None:
        configs = {}
    if not isinstance(configs, dict):
        raise _refuse(f"{param}.configs", "`configs` must be an object of tool configurations keyed by tool name.")
    enabled = {}
    for tool, config in configs.items():
        setting = _config(config, f"{param}.configs.{tool}")
        if "enabled" in setting:
            enabled[str(tool)] = setting["enabled"]
    return default.get("enabled", True), enabled


def _config(config: Any, param: str) -> dict[str, bool]:
    """A tool configuration (`enabled`, `defer_loading`), its booleans checked."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise _refuse(param, "A tool configuration must be an object such as {\"enabled\": true}.")
    for key in ("enabled", "defer_loading"):
        if config.get(key) is not None and not isinstance(config[key], bool):
            raise _refuse(f"{param}.{key}", f"`{key}` must be a boolean.")
    return {key: config[key] for key in ("enabled", "defer_loading") if config.get(key) is not None}
