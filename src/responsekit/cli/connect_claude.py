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
- `ENABLE_TOOL_SEARCH=true`: Claude Code defers its MCP tools to its ToolSearch, which it turns off
  for any base URL but Anthropic's unless told ("Set ENABLE_TOOL_SEARCH=true if your proxy forwards
  tool_reference blocks", https://code.claude.com/docs/en/env-vars); the server keeps them out of
  the model's prompt until a `tool_reference` names them (`orchestration/tool_search.py`).

It also sets `skipWebFetchPreflight: true` (a setting, not a variable: printed beside `env`, and
named in a comment after `--shell`'s exports): Claude Code's
WebFetch tool fetches pages itself, but first asks `api.anthropic.com/api/web/domain_info`
whether the domain may be fetched, and refuses the page when that request fails, which it
does wherever Anthropic's API cannot be reached. Claude Code's settings schema describes the
key as "Skip the WebFetch blocklist check for enterprise environments with restrictive
security policies" (docs/web-search.md, "What each client sees").

With the model's context window known, it also sets when Claude Code compacts (`compaction_env`),
and leaves these out, saying so, when the server does not know it: Claude Code then believes in
a window of 1,000,000 tokens, as before. Claude Code's `ANTHROPIC_DEFAULT_*_MODEL_SUPPORTED_
CAPABILITIES` (effort, thinking…) are not set: Claude Code 2.1.332 reads them only for Bedrock,
Vertex and other cloud providers, never for a base URL of its own (its `mG` returns nothing for a
first-party or gateway provider; tried with `claude -p`: its requests keep `output_config.effort`
and adaptive thinking whatever they say).
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from .served import answer_room, compaction_point


def root_url(url: str) -> str:
    """The server's root: Claude Code adds `/v1/messages` to the base URL it is given."""
    return url.rstrip("/").removesuffix("/v1")


def claude_env(root: str, api_key: str, model: str, small_model: str, window: int | None) -> dict[str, str]:
    """The variables; with `window` (the smaller of the two models' windows: Claude Code applies
    them to every model), those that make it compact inside it."""
    return {
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_AUTH_TOKEN": api_key,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": small_model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "true",
        **(compaction_env(window) if window is not None else {}),
    }


AUTO_COMPACT_WINDOW_FLOOR = 100_000
"""The smallest `CLAUDE_CODE_AUTO_COMPACT_WINDOW` Claude Code takes: a smaller one reads as this."""
OUTPUT_SHARE_LIMIT = 20_000
"""The most of its output maximum Claude Code takes off the auto-compact window."""


def compaction_env(window: int) -> dict[str, str]:
    """What makes Claude Code compact at `compaction_point(window)`, with answers of at most
    `answer_room(window)` tokens.

    Claude Code 2.1.332 compacts when the prompt reaches `threshold = min(floor(effective * pct /
    100), effective - 13000)`, where `effective = window - min(max_output, 20000)` (its `gse` and
    `QG`), `window` being the smaller of the model's and `CLAUDE_CODE_AUTO_COMPACT_WINDOW`, and
    `pct` `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` (up to 100). Two ways tell it a small window:

    - `CLAUDE_CODE_MAX_CONTEXT_TOKENS` as the model's window. The 13,000 stay: on a 32,768-token
      window with 8,192-token answers it compacts at 11,576 tokens, below its own first prompt
      (about 12,300 with its tools), so it compacts after every turn until it gives up (tried with
      `claude -p` on a scripted engine, 8 commands of 2,500 tokens asked: after the fifth, "rapid-
      refill breaker tripped", exit 1).
    - `CLAUDE_CODE_AUTO_COMPACT_WINDOW`, at least 100,000 (the model's window stays the million
      Claude Code assumes), with `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE` placing the threshold anywhere
      below `effective - 13000`: this one. On the same engine it compacts once, near 24,000 tokens,
      and runs all 8; Claude Code also stops warning that it does not know the model.

    Gateway users report the same gap: https://github.com/anthropics/claude-code/issues/68522,
    https://github.com/anthropics/claude-code/issues/57964 (the auto-compact window is capped at
    the model's), https://github.com/anthropics/claude-code/issues/72462 (a custom model that
    never compacts). The percentage is rounded down, so the threshold never passes the point."""
    output = answer_room(window)
    auto_window = max(window, AUTO_COMPACT_WINDOW_FLOOR)
    effective = auto_window - min(output, OUTPUT_SHARE_LIMIT)
    percent = min(100.0, math.floor(compaction_point(window) * 10_000 / effective) / 100)
    return {
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output),
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(auto_window),
        "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": f"{percent:g}",
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
