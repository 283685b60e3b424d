"""`responsekit connect claude`: the environment that points Claude Code at a running ResponseKit.

Claude Code reads its endpoint, credential and model names from environment variables, which
its `settings.json` can hold in an `env` object (so that every `claude` run gets them). What is set,
from Claude Code's LLM-gateway and environment-variable documentation:

- `ANTHROPIC_BASE_URL`: the server's root; Claude Code appends `/v1/messages` itself.
- `ANTHROPIC_AUTH_TOKEN`: sent as `Authorization: Bearer`, the credential the gateway documentation
  gives for a gateway's static key (`ANTHROPIC_API_KEY` would also do, but in an interactive
  session Claude Code first asks whether to use it). Some value must be set even when ResponseKit
  takes no keys: without a credential Claude Code opens its login screen.
- `ANTHROPIC_MODEL` and `ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL`: the main model and what
  the `opus`/`sonnet`/`haiku` aliases (and Claude Code's background requests, which use the haiku
  one) resolve to, so that no `claude-…` name ResponseKit does not serve is asked for.
  `ANTHROPIC_SMALL_FAST_MODEL` is left out: the documentation deprecates it for the haiku one.
- `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`: no telemetry, error reporting or auto-update
  requests to Anthropic's hosts, which a machine using a local gateway may not reach.

It also sets `skipWebFetchPreflight: true` (a setting, not a variable: printed beside `env`, and
named in a comment after `--shell`'s exports): Claude Code's
WebFetch tool fetches pages itself, but first asks `api.anthropic.com/api/web/domain_info`
whether the domain may be fetched, and refuses the page when that request fails, which it
does wherever Anthropic's API cannot be reached. Claude Code's settings schema describes the
key as "Skip the WebFetch blocklist check for enterprise environments with restrictive
security policies" (docs/web-search.md, "What each client sees").
"""

from __future__ import annotations

import json
import shlex
from typing import Any


def root_url(url: str) -> str:
    """The server's root: Claude Code adds `/v1/messages` to the base URL it is given."""
    return url.rstrip("/").removesuffix("/v1")


def claude_env(root: str, api_key: str, model: str, small_model: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_AUTH_TOKEN": api_key,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": small_model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


SETTINGS: dict[str, Any] = {"skipWebFetchPreflight": True}
"""Settings merged in beside `env`."""


def settings_fragment(env: dict[str, str]) -> str:
    """What `settings.json` needs, to merge by hand."""
    return json.dumps({"env": env, **SETTINGS}, indent=2)


def settings_document(existing: str, env: dict[str, str]) -> str:
    """`settings.json` with `env` and `SETTINGS` merged in: other settings and other variables are kept."""
    settings: dict[str, Any] = json.loads(existing) if existing.strip() else {}
    if not isinstance(settings, dict):
        raise TypeError("settings.json does not hold a JSON object")
    current = settings.get("env")
    if current is not None and not isinstance(current, dict):
        raise TypeError('the "env" of settings.json is not a JSON object')
    settings.update(SETTINGS)
    settings["env"] = {**(current or {}), **env}
    return json.dumps(settings, indent=2) + "\n"


def shell_exports(env: dict[str, str]) -> str:
    exports = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items())
    settings = ", ".join(f'"{key}": {json.dumps(value)}' for key, value in SETTINGS.items())
    return f"{exports}\n# and in ~/.claude/settings.json (no variable sets it): {settings}"
