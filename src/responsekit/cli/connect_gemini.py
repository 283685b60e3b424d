"""`responsekit connect gemini`: what points Gemini CLI at a running ResponseKit.

Gemini CLI (`@google/gemini-cli`, read in its 0.61 source and run against a capture server:
tests/data/gemini_cli_requests.json) talks to the Gemini API through Google's `@google/genai` SDK,
which appends `/v1beta/models/{model}:streamGenerateContent?alt=sse` to its base URL. It needs:

- `GOOGLE_GEMINI_BASE_URL`: the server's root (no `/v1`).
- `GEMINI_API_KEY`: sent as `x-goog-api-key`; some value must be set even when ResponseKit takes
  no keys, or Gemini CLI stops before its first request.
- `GEMINI_MODEL`: the model asked for (`-m`/`--model` wins over it, and it over `model.name` in
  settings.json). Without one Gemini CLI asks for `auto`, which it resolves itself: a routing
  request to a `flash-lite` model, then the answer from a Gemini model it picked.
- `security.auth.selectedType: "gemini-api-key"` in settings.json: with `GOOGLE_GEMINI_BASE_URL`
  set and no auth type chosen, Gemini CLI takes the `gateway` type from the environment and then
  refuses it ("Invalid auth method selected.", exit 41).
- `privacy.usageStatisticsEnabled: false`: otherwise every start posts usage statistics to
  `play.googleapis.com` and every request carries the installation's id
  (`x-gemini-api-privileged-user-id`); `general.enableAutoUpdate` and
  `general.enableAutoUpdateNotification` false: no update check against npm, no update run.
- `modelConfigs.customOverrides` for the models Gemini CLI's helper requests name whatever the
  chosen model (`web-search`, `web-fetch`, `loop-detection`, `next-speaker-checker`, chat
  compression… ask for `gemini-3-flash-preview`; compression and a loop double-check for
  `gemini-3-pro-preview`; summarizers and the router for `flash-lite`): an override matching
  the model an alias resolves to replaces it, so these requests reach the chosen model too.
- `model.compressionThreshold`, with the model's context window known: Gemini CLI compresses its
  history (summarizes the older part) once the last prompt reaches that fraction of the window it
  believes the model has, which is a million tokens for any model it does not know; here, the
  fraction of that belief that is the compaction point (`served.compaction_point`). Left out, and
  said, with the window unknown: Gemini CLI then compresses at half its belief.

The variables go into `~/.gemini/.env`, which Gemini CLI loads at start (`findEnvFile`: the first
of `.gemini/.env` or `.env` walking up from the working directory, then `~/.gemini/.env`, then
`~/.env`; only in a trusted folder; variables already set win). A project with its own `.env`
hides `~/.gemini/.env`: export the variables there instead. `GEMINI_CLI_HOME` stands for the home
directory when set, as it does for Gemini CLI.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from pathlib import Path
from typing import Any

from .served import compaction_point

HELPER_MODELS = ("gemini-3-flash-preview", "gemini-3-pro-preview", "flash-lite")
"""What the helper aliases of Gemini CLI 0.61's `DEFAULT_MODEL_CONFIGS` resolve to."""
BELIEVED_WINDOW = 1_048_576
"""The window Gemini CLI 0.61 believes a model has (`tokenLimit`: `DEFAULT_TOKEN_LIMIT`) unless
`BELIEVED_WINDOWS` names it; `compressionThreshold` is a fraction of it."""
BELIEVED_WINDOWS = {"gemma-4-31b-it": 256_000, "gemma-4-26b-a4b-it": 256_000}


def gemini_dir() -> Path:
    """Gemini CLI's directory, `~/.gemini`, with `GEMINI_CLI_HOME` standing for the home."""
    return Path(os.environ.get("GEMINI_CLI_HOME") or Path.home()) / ".gemini"


def root_url(url: str) -> str:
    """The server's root: the SDK adds `/v1beta/models/…` to the base URL it is given."""
    return url.rstrip("/").removesuffix("/v1beta").removesuffix("/v1")


def gemini_env(root: str, api_key: str, model: str) -> dict[str, str]:
    return {"GOOGLE_GEMINI_BASE_URL": root, "GEMINI_API_KEY": api_key, "GEMINI_MODEL": model}


def gemini_settings(model: str, window: int | None) -> dict[str, Any]:
    """The settings.json entries, for `model` (the helper requests' model) and its `window`."""
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        **({"model": {"compressionThreshold": compression_threshold(model, window)}} if window is not None else {}),
        "modelConfigs": {"customOverrides": [
            {"match": {"model": helper}, "modelConfig": {"model": model}} for helper in HELPER_MODELS
        ]},
    }  # fmt: skip


def compression_threshold(model: str, window: int) -> float:
    """The fraction of the window Gemini CLI believes `model` has at which it compresses (its
    `ChatCompressionService`: when the last prompt is not below `threshold * tokenLimit(model)`),
    rounded down. A window larger than that belief counts as the belief: Gemini CLI sends nothing
    past it."""
    believed = BELIEVED_WINDOWS.get(model, BELIEVED_WINDOW)
    return math.floor(compaction_point(min(window, believed)) * 1_000_000 / believed) / 1_000_000


def _ours(override: Any) -> bool:
    return isinstance(override, dict) and override.get("match") in [{"model": helper} for helper in HELPER_MODELS]


def _merge(mine: dict[str, Any], theirs: dict[str, Any], where: str) -> dict[str, Any]:
    """`theirs` with `mine` merged in, object by object; other keys kept."""
    merged = dict(theirs)
    for key, value in mine.items():
        current = merged.get(key)
        if isinstance(value, dict):
            if current is not None and not isinstance(current, dict):
                raise TypeError(f'the "{where}{key}" of settings.json is not a JSON object')
            merged[key] = _merge(value, current or {}, f"{where}{key}.")
        elif key == "customOverrides":
            if current is not None and not isinstance(current, list):
                raise TypeError(f'the "{where}{key}" of settings.json is not a JSON array')
            merged[key] = [entry for entry in current or [] if not _ours(entry)] + value
        else:
            merged[key] = value
    return merged


def settings_document(existing: str, settings: dict[str, Any]) -> str:
    """`settings.json` with `settings` merged in: other settings, and overrides of other models, kept."""
    current: Any = json.loads(existing) if existing.strip() else {}
    if not isinstance(current, dict):
        raise TypeError("settings.json does not hold a JSON object")
    return json.dumps(_merge(settings, current, ""), indent=2) + "\n"


_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([\w.-]+)\s*=")


def _dotenv_value(value: str) -> str:
    return value if re.fullmatch(r"[\w.:/@%+,=-]*", value) else json.dumps(value)


def env_document(existing: str, env: dict[str, str]) -> str:
    """`.env` with `env` set: its other lines kept, a line that set one of these names replaced."""
    lines, written = [], set()
    for line in existing.splitlines():
        found = _ASSIGNMENT.match(line)
        if found and found.group(1) in env:
            name = found.group(1)
            if name not in written:
                lines.append(f"{name}={_dotenv_value(env[name])}")
                written.add(name)
            continue
        lines.append(line)
    lines += [f"{name}={_dotenv_value(value)}" for name, value in env.items() if name not in written]
    return "\n".join(lines) + "\n"


def printed(env: dict[str, str], settings: dict[str, Any]) -> str:
    """The variables as `export` lines (for a shell or `~/.gemini/.env`) and the settings.json entries."""
    exports = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items())
    return f"{exports}\n# and in ~/.gemini/settings.json (merged with what is there):\n{json.dumps(settings, indent=2)}"
