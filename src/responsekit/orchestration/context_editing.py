"""Context editing: old tool results and old reasoning cleared from the history the engine reads.

Anthropic's Messages API does this on the server, before the prompt reaches the model, while
the client keeps its whole history (https://docs.claude.com/en/docs/build-with-claude/context-editing);
Claude Code asks for it from gateway models too. The edits here work on the canonical
conversation, in no protocol's shape: a frontend translates its client's request into
`ClearToolUses` / `ClearThinking` and renders the `AppliedEdit`s back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ..canonical.conversation import GenerationRequest, Message, TextPart

CLEARED_RESULT = "[Tool result cleared to save context]"
"""What a cleared tool result reads. Anthropic's docs say only that a placeholder "lets Claude
know the tool result was removed", not its words: these are ours. The tool message stays, so
every call keeps its result and chat templates see the pairs they expect."""

CLEARED_INPUT = "{}"
"""A cleared call's arguments: an empty object, which every template renders."""


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    """`clear_tool_uses_20250919`: past the trigger, the results of all but the last `keep`
    tool uses are replaced by `CLEARED_RESULT` (their arguments too, with `clear_inputs`)."""

    trigger_tokens: int | None = 100_000
    """Clear once the prompt's input tokens exceed this (Anthropic's default trigger)."""
    trigger_tool_uses: int | None = None
    """Or once the history holds more tool uses than this."""
    keep: int = 3
    clear_at_least: int = 0
    """Clear nothing unless at least this many tokens would be freed."""
    exclude_tools: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False
    """True: every cleared call's arguments too; a set: those of the calls of these tools."""


@dataclass(frozen=True, slots=True)
class ClearThinking:
    """`clear_thinking_20251015`: the reasoning of all but the last `keep` assistant turns that
    reasoned is dropped. A turn is what the assistant does between two user messages, its tool
    loop included, so a loop under way keeps its reasoning. None keeps all."""

    keep: int | None = 1


ContextEdit: TypeAlias = ClearToolUses | ClearThinking


@dataclass(frozen=True, slots=True)
class AppliedEdit:
    edit: ContextEdit
    cleared: int
    """Tool uses (`ClearToolUses`) or thinking turns (`ClearThinking`) cleared."""
    cleared_tokens: int
    """Input tokens freed, estimated as the pipeline estimates a prompt (four characters a token)."""


@dataclass(slots=True)
class _Use:
    """A tool call of the history and its result message, if any."""

    assistant: Message
    index: int
    result: Message | None = None


def apply_edits(generation: GenerationRequest, edits: Sequence[ContextEdit], input_tokens: int) -> list[AppliedEdit]:
    """Apply `edits` in order to `generation.messages` (changed in place); `input_tokens`: the
    prompt's count, which each edit's trigger compares after the edits before it freed theirs.
    Only the edits that cleared something are returned."""
    applied = []
    for edit in edits:
        done = _clear_thinking(generation, edit) if isinstance(edit, ClearThinking) else \
            _clear_tool_uses(generation, edit, input_tokens)  # fmt: skip
        if done is not None:
            applied.append(done)
            input_tokens -= done.cleared_tokens
    return applied


def _clear_thinking(generation: GenerationRequest, edit: ClearThinking) -> AppliedEdit | None:
    if edit.keep is None:
        return None
    turns: list[list[Message]] = []
    for message in generation.messages:
        if message.role == "user" or not turns:
            turns.append([])
        if message.role == "assistant":
            turns[-1].append(message)
    reasoned = [turn for turn in turns if any(message.reasoning for message in turn)]
    cleared = reasoned[: max(0, len(reasoned) - edit.keep)]
    characters = 0
    for turn in cleared:
        for message in turn:
            characters += len(message.reasoning or "")
            message.reasoning = None
    return AppliedEdit(edit, len(cleared), characters // 4) if cleared else None


def _clear_tool_uses(generation: GenerationRequest, edit: ClearToolUses, input_tokens: int) -> AppliedEdit | None:
    uses: dict[str, _Use] = {}
    for message in generation.messages:
        if message.role == "assistant":
            for index, call in enumerate(message.tool_calls):
                uses[call.id] = _Use(message, index)
        elif message.role == "tool" and message.tool_call_id in uses:
            uses[message.tool_call_id].result = message
    over_tokens = edit.trigger_tokens is not None and input_tokens > edit.trigger_tokens
    over_uses = edit.trigger_tool_uses is not None and len(uses) > edit.trigger_tool_uses
    if not (over_tokens or over_uses):
        return None
    older = list(uses.values())[: max(0, len(uses) - edit.keep)]
    clearing = [use for use in older if use.assistant.tool_calls[use.index].name not in edit.exclude_tools]
    clearing = [use for use in clearing if _clears_result(use) or _clears_input(use, edit)]  # not cleared before
    freed = sum(_freed(use, edit) for use in clearing) // 4
    if not clearing or freed < edit.clear_at_least:
        return None
    for use in clearing:
        if use.result is not None:
            use.result.content = [TextPart(CLEARED_RESULT)]
        if _clears_input(use, edit):
            use.assistant.tool_calls[use.index].arguments = CLEARED_INPUT
    return AppliedEdit(edit, len(clearing), freed)


def _freed(use: _Use, edit: ClearToolUses) -> int:
    """The characters clearing `use` frees."""
    characters = 0
    if _clears_result(use):
        assert use.result is not None
        characters += max(0, len(use.result.text()) - len(CLEARED_RESULT))
    if _clears_input(use, edit):
        characters += max(0, len(use.assistant.tool_calls[use.index].arguments) - len(CLEARED_INPUT))
    return characters


def _clears_result(use: _Use) -> bool:
    return use.result is not None and not (len(use.result.content) == 1 and use.result.text() == CLEARED_RESULT)


def _clears_input(use: _Use, edit: ClearToolUses) -> bool:
    call = use.assistant.tool_calls[use.index]
    wanted = edit.clear_inputs if isinstance(edit.clear_inputs, bool) else call.name in edit.clear_inputs
    return wanted and call.arguments != CLEARED_INPUT
