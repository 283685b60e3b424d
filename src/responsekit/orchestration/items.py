"""Input items in the shape they are stored and listed in: every item has an id.

Clients send items loosely (no `type`, no id, string content); stored history, input-item
lists and conversations hold them normalized. An item that is not an object or has an
unknown type is dropped with a warning: a replayed history with one odd item must not
fail the request.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..canonical.ids import MAX_CLIENT_ID, new_id, storable_id

log = logging.getLogger(__name__)

_ID_PREFIXES = {
    "message": "msg", "reasoning": "rs", "function_call": "fc", "function_call_output": "fco",
    "custom_tool_call": "ctc", "custom_tool_call_output": "ctco", "file_search_call": "fs",
    "web_search_call": "ws", "computer_call": "cu", "computer_call_output": "cuo",
    "image_generation_call": "ig", "code_interpreter_call": "ci", "local_shell_call": "lsh",
    "local_shell_call_output": "lsho", "shell_call": "sh", "shell_call_output": "sho",
    "apply_patch_call": "apc", "apply_patch_call_output": "apco", "mcp_list_tools": "mcpl",
    "mcp_approval_request": "mcpr", "mcp_approval_response": "mcpa", "mcp_call": "mcp",
    "compaction": "cmp", "tool_search_call": "tsc", "tool_search_output": "tso",
    "additional_tools": "adt", "configuration_update": "cfg", "program": "prg", "program_output": "prgo",
}  # fmt: skip
"""Every input item type of the API, with the id prefix OpenAI uses for it."""

_ROLES = ("user", "system", "developer", "assistant")
_CLIENT_RUN = ("shell_call", "shell_call_output", "local_shell_call", "apply_patch_call", "apply_patch_call_output",
               "computer_call", "computer_call_output")  # fmt: skip
"""Items of the built-in tools the client runs whose listed form has a status (openai-python's
`ResponseItem`); the client may leave it out of an input item."""


def normalize_items(items: list[Any]) -> list[dict[str, Any]]:
    """Items with ids and explicit types; odd ones dropped with a warning."""
    normalized = []
    for position, item in enumerate(items):
        result = normalize_item(item)
        if isinstance(result, str):
            log.warning("skipping input item %d: %s", position, result)
        else:
            normalized.append(result)
    return normalized


def normalize_item(item: Any) -> dict[str, Any] | str:
    """The stored form of one item, or the reason it cannot be used."""
    if not isinstance(item, dict):
        return f"not an object: {str(item)[:80]!r}"
    kind = item.get("type", "message" if "role" in item else None)
    if kind not in _ID_PREFIXES:
        return f"item type {kind!r} is unknown"
    result = {**item, "type": kind}
    if not isinstance(result.get("id"), str) or not result["id"]:
        result["id"] = new_id(_ID_PREFIXES[kind])
    elif not storable_id(result["id"]):
        return (f"its id {result['id'][:80]!a} cannot be stored (a NUL, a lone surrogate, or more than "
                f"{MAX_CLIENT_ID} characters)")
    if kind == "message":
        return _message(result)
    if kind in ("function_call", "custom_tool_call"):
        if not isinstance(result.get("name"), str) or not result["name"]:
            return f"{kind} without a name"
        result.setdefault("call_id", result["id"])
        if kind == "function_call" and not isinstance(result.get("arguments"), str):
            result["arguments"] = json.dumps(result.get("arguments") or {}, ensure_ascii=False)
        if kind == "custom_tool_call" and not isinstance(result.get("input"), str):
            return "custom_tool_call without an input string"
    elif kind in ("function_call_output", "custom_tool_call_output"):
        if not isinstance(result.get("call_id"), str) or not result["call_id"]:
            return f"{kind} without a call_id"
        if not isinstance(result.get("output"), (str, list)):
            return f"{kind} output is neither a string nor a list"
    elif kind == "reasoning" and not isinstance(result.get("summary"), list):
        result["summary"] = []
    if kind in ("function_call", "function_call_output", "custom_tool_call_output", "reasoning", *_CLIENT_RUN):
        result.setdefault("status", "completed")
    if kind == "shell_call":
        result.setdefault("environment", None)
    elif kind == "shell_call_output":
        result.setdefault("max_output_length", None)
    elif kind == "computer_call":
        result.setdefault("pending_safety_checks", [])
    return result


def _message(item: dict[str, Any]) -> dict[str, Any] | str:
    role = item.get("role")
    if role not in _ROLES:
        return f"message role {role!r}"
    content = item.get("content")
    part_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        part: dict[str, Any] = {"type": part_type, "text": content}
        if role == "assistant":
            part["annotations"] = []
        item["content"] = [part]
    elif isinstance(content, list):
        item["content"] = [p for p in content if isinstance(p, dict)]
    else:
        return f"{role} message content is neither a string nor a list"
    item.setdefault("status", "completed")
    return item
