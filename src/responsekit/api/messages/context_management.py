"""The Messages API's `context_management` (beta `context-management-2025-06-27`): its edits as
the pipeline's context edits (`orchestration/context_editing.py`), and the `applied_edits` of
the answer, in the shapes of https://docs.claude.com/en/docs/build-with-claude/context-editing.

A bad shape is a 400, as on Anthropic's API. `compact_20260112` (a summary of the history made
on the server) is left out with a warning: Claude Code compacts by itself when it is not
honoured, and refusing it would fail every turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ...canonical.errors import APIError
from ...orchestration.context_editing import AppliedEdit, ClearThinking, ClearToolUses, ContextEdit

log = logging.getLogger(__name__)

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"


def context_edits(value: dict[str, Any] | None) -> list[ContextEdit] | None:
    """The request's edits, in their order; None without `context_management`."""
    if value is None:
        return None
    edits = value.get("edits", [])
    if not isinstance(edits, list):
        raise _invalid("`edits` must be a list.", "context_management.edits")
    out: list[ContextEdit] = []
    seen: set[str] = set()
    for position, edit in enumerate(edits):
        param = f"context_management.edits.{position}"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind not in (CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT):
            raise _invalid(f"Unknown context edit type {kind!r}.", f"{param}.type")
        assert isinstance(edit, dict) and isinstance(kind, str)
        if kind in seen:
            raise _invalid(f"`{kind}` is given twice.", param)
        seen.add(kind)
        if kind == CLEAR_THINKING and position != 0:
            # Anthropic's API wants the thinking edit first, where its clearing happens first.
            raise _invalid(f"`{CLEAR_THINKING}` must be the first edit.", param)
        if kind == COMPACT:
            log.warning("context edit %s is left out: this server does not compact Messages histories", COMPACT)
        else:
            out.append(_clear_thinking(edit, param) if kind == CLEAR_THINKING else _clear_tool_uses(edit, param))
    return out


def applied_edits(applied: Sequence[AppliedEdit]) -> dict[str, Any]:
    """The answer's `context_management`: the edits that cleared something (none: an empty list)."""
    out = []
    for edit in applied:
        if isinstance(edit.edit, ClearThinking):
            out.append({"type": CLEAR_THINKING, "cleared_thinking_turns": edit.cleared,
                        "cleared_input_tokens": edit.cleared_tokens})  # fmt: skip
        else:
            out.append({"type": CLEAR_TOOL_USES, "cleared_tool_uses": edit.cleared,
                        "cleared_input_tokens": edit.cleared_tokens})  # fmt: skip
    return {"applied_edits": out}


def _clear_tool_uses(edit: dict[str, Any], param: str) -> ClearToolUses:
    """What the edit gives; what it leaves out keeps `ClearToolUses`' defaults (Anthropic's)."""
    given: dict[str, Any] = {}
    trigger = edit.get("trigger")
    if trigger is not None:
        kind = trigger.get("type") if isinstance(trigger, dict) else None
        if kind not in ("input_tokens", "tool_uses"):
            raise _invalid("`trigger.type` must be `input_tokens` or `tool_uses`.", f"{param}.trigger")
        assert isinstance(trigger, dict)
        value = _count(trigger, f"{param}.trigger")
        given["trigger_tokens"], given["trigger_tool_uses"] = (value, None) if kind == "input_tokens" else (None, value)
    if (keep := _measure(edit.get("keep"), "tool_uses", f"{param}.keep")) is not None:
        given["keep"] = keep
    if (at_least := _measure(edit.get("clear_at_least"), "input_tokens", f"{param}.clear_at_least")) is not None:
        given["clear_at_least"] = at_least
    exclude = edit.get("exclude_tools")
    if exclude is not None:
        if not _names(exclude):
            raise _invalid("`exclude_tools` must be a list of tool names.", f"{param}.exclude_tools")
        given["exclude_tools"] = frozenset(exclude)
    inputs = edit.get("clear_tool_inputs")
    if inputs is not None:
        if not isinstance(inputs, bool) and not _names(inputs):
            raise _invalid("`clear_tool_inputs` must be a boolean or a list of tool names.",
                           f"{param}.clear_tool_inputs")  # fmt: skip
        given["clear_inputs"] = inputs if isinstance(inputs, bool) else frozenset(inputs)
    return ClearToolUses(**given)


def _clear_thinking(edit: dict[str, Any], param: str) -> ClearThinking:
    keep = edit.get("keep")
    if keep is None:
        return ClearThinking()
    if keep == "all" or keep == {"type": "all"}:
        return ClearThinking(keep=None)
    turns = _measure(keep, "thinking_turns", f"{param}.keep")
    assert turns is not None
    return ClearThinking(keep=turns)


def _measure(value: Any, kind: str, param: str) -> int | None:
    """A `{"type": kind, "value": n}` object's count; None when not given."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != kind:
        raise _invalid(f"Expected an object with `type` `{kind}` and a `value`.", param)
    return _count(value, param)


def _count(value: dict[str, Any], param: str) -> int:
    count = value.get("value")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise _invalid("`value` must be a non-negative integer.", f"{param}.value")
    return count


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def _invalid(message: str, param: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_value")
