"""`responsekit connect codex`: a Codex CLI provider entry and model catalog for a running ResponseKit.

Codex knows its own models only; for any other it falls back to generic metadata (and
warns). The catalog written here describes each model ResponseKit serves, cloned from an
entry of the installed Codex's own catalog (so it matches that Codex version), with
reasoning summaries and the freeform apply_patch tool on, every tool offered up front
(no deferred tool search). Codex sends parallel tool calls by default.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import tomlkit

PROVIDER = "responsekit"


def codex_catalog(codex: str) -> dict[str, Any]:
    """The installed Codex's own model catalog (`codex debug models`)."""
    done = subprocess.run([codex, "debug", "models"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60, check=True)  # fmt: skip
    return json.loads(done.stdout)


def find_codex(explicit: str | None) -> str | None:
    return explicit or shutil.which("codex")


def catalog_for(models: list[str], template: dict[str, Any], context_window: int) -> dict[str, Any]:
    entries = []
    for priority, model in enumerate(models):
        entry = {
            **template,
            "slug": model,
            "display_name": model,
            "description": "Served by ResponseKit",
            "visibility": "list",
            "supported_in_api": True,
            "priority": priority,
            "upgrade": None,
            "availability_nux": None,
            "service_tiers": [],
            "additional_speed_tiers": [],
            "default_reasoning_summary": "auto",
            "apply_patch_tool_type": "freeform",
            # Codex's tool_search (deferred tools found by a client-side search) needs
            # tool_search_call items, which ResponseKit does not produce yet: offer every tool.
            "supports_search_tool": False,
            "context_window": context_window,
            "max_context_window": context_window,
        }
        entries.append(entry)
    return {"models": entries}


def pick_template(catalog: dict[str, Any]) -> dict[str, Any]:
    """A general-purpose listed model of Codex's catalog to clone."""
    listed = [m for m in catalog.get("models", []) if m.get("visibility") == "list"]
    if not listed:
        raise ValueError("the Codex catalog lists no model to use as a template")
    return listed[-1]


def config_document(
    existing: str, base_url: str, model: str, catalog_path: Path | None, api_key_env: str | None
) -> str:
    """`config.toml` with the ResponseKit provider set (other settings kept)."""
    document = tomlkit.parse(existing) if existing.strip() else tomlkit.document()
    document["model"] = model
    document["model_provider"] = PROVIDER
    document["model_reasoning_summary"] = "auto"
    if catalog_path is not None:
        document["model_catalog_json"] = str(catalog_path)
    provider = tomlkit.table()
    provider["name"] = "ResponseKit"
    provider["base_url"] = base_url
    provider["wire_api"] = "responses"
    if api_key_env:
        provider["env_key"] = api_key_env
    providers = document.setdefault("model_providers", tomlkit.table())
    providers[PROVIDER] = provider
    return tomlkit.dumps(document)
