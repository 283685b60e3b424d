"""What the `connect` commands know of a server's models, and how much of a model's context window
an agent may fill before it compacts.

Each agent compacts its conversation itself (summarizes it, and goes on from the summary) once the
prompt passes a threshold it derives from the window it believes the model has. For a model it
does not know, Claude Code and Gemini CLI believe in a million tokens, and Codex in whatever its
catalog says: told nothing, they let the prompt outgrow an open model's window, and the engine
refuses every turn after that. The commands tell each agent one point, `compaction_point`, in the
agent's own terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

ANSWER_ROOM_LIMIT = 32_000
"""The most room kept for an answer: Claude Code's own output maximum for a model it does not know."""


@dataclass(frozen=True)
class ServedModel:
    id: str
    context_window: int | None
    """Tokens a sequence holds, prompt and answer; None when the server does not know."""
    takes_images: bool
    """Whether images reach the model (read, or described by the server's vision model)."""


def served_models(base_url: str, api_key: str | None) -> list[ServedModel]:
    """`GET {base_url}/models`, with the extension fields ResponseKit adds to OpenAI's shape
    (an older server without them: windows unknown, images taken)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    answer = httpx.get(f"{base_url}/models", headers=headers, timeout=10)
    answer.raise_for_status()
    return [_served(entry) for entry in answer.json()["data"]]


def _served(entry: dict[str, Any]) -> ServedModel:
    window = entry.get("context_window")
    return ServedModel(id=entry["id"], context_window=window if isinstance(window, int) and window > 0 else None,
                       takes_images="image" in entry.get("input_modalities", ["image"]))  # fmt: skip


def window_of(models: list[ServedModel], name: str) -> int | None:
    """The window of the served model `name` (None: unknown, or not listed)."""
    return next((model.context_window for model in models if model.id == name), None)


def answer_room(window: int) -> int:
    """Tokens kept free above the compaction point: room for a turn's answer, or for the summary
    when a turn's tool results carried the prompt past the point. A quarter of the window leaves
    three quarters to the agent's own prompt (Claude Code's system prompt and tools are about
    12,000 tokens) and the conversation."""
    return min(window // 4, ANSWER_ROOM_LIMIT)


def compaction_point(window: int) -> int:
    """The prompt size at which an agent should compact: the engine refuses only a prompt
    beyond the window, so a turn may add up to `answer_room` tokens past it and still be answered."""
    return window - answer_room(window)
