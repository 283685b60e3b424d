"""`responsekit connect codex`: a Codex CLI provider entry and model catalog for a running ResponseKit.

Codex knows its own models only; for any other it falls back to generic metadata (and warns),
window included. The catalog written here (`model_catalog_json`: `{"models": [ModelInfo…]}`, the
`ModelInfo` of https://github.com/openai/codex/blob/main/codex-rs/protocol/src/openai_models.rs) has
an entry for each model ResponseKit serves, with what the server knows of it:

- `context_window` (and `max_context_window`, the most a config override may state): the server's,
  or `--context-window` for a model whose window it does not know;
- `auto_compact_token_limit`: the compaction point (`served.compaction_point`). Codex's own is 90%
  of the window, the most it takes (`ModelInfo::auto_compact_token_limit` clamps a larger one);
- `input_modalities`: text, and images where they reach the model (`/v1/models` says); Codex leaves
  an image out itself for a model that takes none;
- `supported_reasoning_levels` low, medium and high, `supports_reasoning_summaries` and the `auto`
  summary: the server cannot tell whether a model reasons, and these three are the efforts every
  reasoning template takes (a model that does not reason ignores them);
- `supports_search_tool`: Codex then defers its MCP tools to its own tool search, whose calls the
  server gives as `tool_search_call` items, and the model's prompt holds only the tools it found
  (`orchestration/tool_search.py`);
- the freeform apply_patch tool; Codex sends parallel tool calls by default.

The rest of an entry is cloned from a listed model of the installed Codex's own catalog (`codex
debug models`), so it matches that version, Codex's instructions (its system prompt) among it. Without
a `codex` to ask, an entry has the fields Codex requires (`BASE_ENTRY`) and empty instructions:
Codex refuses a catalog entry without them, and its own are in its binary only.

The provider entry declares `remote_compaction = "v2"`: Codex then compacts on the server, with a
`compaction_trigger` answered by one `compaction` item, instead of a summarizing turn of its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import tomlkit

from .served import ServedModel, compaction_point

PROVIDER = "responsekit"

BASE_ENTRY: dict[str, Any] = {
    "shell_type": "unified_exec",
    "support_verbosity": False,
    "default_verbosity": None,
    "web_search_tool_type": "text",
    "truncation_policy": {"mode": "tokens", "limit": 10_000},
    "supports_parallel_tool_calls": True,
    "experimental_supported_tools": [],
    "base_instructions": "",
}
"""The fields Codex requires of an entry (serde fields without a default, and instructions) that
`entry` does not set, for when no Codex can be asked: the shell, verbosity, truncation and tools of
Codex's own listed models, and no instructions."""

REASONING_LEVELS = [
    {"effort": "low", "description": "Fast responses with lighter reasoning"},
    {"effort": "medium", "description": "Balances speed and reasoning depth for everyday tasks"},
    {"effort": "high", "description": "Greater reasoning depth for complex problems"},
]
"""In the words of Codex's own catalog."""


def codex_catalog(codex: str) -> dict[str, Any]:
    """The installed Codex's own model catalog (`codex debug models`)."""
    done = subprocess.run([codex, "debug", "models"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60, check=True)  # fmt: skip
    return json.loads(done.stdout)


def find_codex(explicit: str | None) -> str | None:
    return explicit or shutil.which("codex")


def catalog_for(models: list[ServedModel], template: dict[str, Any], fallback_window: int) -> dict[str, Any]:
    return {"models": [entry(model, template, fallback_window, priority) for priority, model in enumerate(models)]}


def entry(model: ServedModel, template: dict[str, Any], fallback_window: int, priority: int) -> dict[str, Any]:
    """`model`'s catalog entry: `template` with what the server knows of the model."""
    window = model.context_window or fallback_window
    return {
        **template,
        "slug": model.id,
        "display_name": model.id,
        "description": "Served by ResponseKit",
        "visibility": "list",
        "supported_in_api": True,
        "priority": priority,
        "upgrade": None,
        "availability_nux": None,
        "service_tiers": [],
        "additional_speed_tiers": [],
        "default_reasoning_level": "medium",
        "supported_reasoning_levels": REASONING_LEVELS,
        "supports_reasoning_summaries": True,
        "default_reasoning_summary": "auto",
        "apply_patch_tool_type": "freeform",
        "input_modalities": ["text", "image"] if model.takes_images else ["text"],
        "supports_search_tool": True,
        "context_window": window,
        "max_context_window": window,
        "auto_compact_token_limit": min(compaction_point(window), window * 9 // 10),
    }


def pick_template(catalog: dict[str, Any]) -> dict[str, Any]:
    """A general-purpose listed model of Codex's catalog to clone."""
    listed = [m for m in catalog.get("models", []) if m.get("visibility") == "list"]
    if not listed:
        raise ValueError("the Codex catalog lists no model to use as a template")
    return listed[-1]


def config_document(existing: str, base_url: str, model: str, catalog_path: Path, api_key_env: str | None) -> str:
    """`config.toml` with the ResponseKit provider set (other settings kept)."""
    document = tomlkit.parse(existing) if existing.strip() else tomlkit.document()
    document["model"] = model
    document["model_provider"] = PROVIDER
    document["model_reasoning_summary"] = "auto"
    document["model_catalog_json"] = str(catalog_path)
    provider = tomlkit.table()
    provider["name"] = "ResponseKit"
    provider["base_url"] = base_url
    provider["wire_api"] = "responses"
    if api_key_env:
        provider["env_key"] = api_key_env
    # docs/clients.md, Codex: the served model's summary sealed in the one `compaction` item.
    capabilities = tomlkit.table()
    capabilities["remote_compaction"] = "v2"
    provider["capabilities"] = capabilities
    providers = document.setdefault("model_providers", tomlkit.table())
    providers[PROVIDER] = provider
    return tomlkit.dumps(document)
