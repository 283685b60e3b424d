"""Requests ResponseKit makes to models on its own account: reasoning summaries and compaction."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable

from ..backends.router import ModelRouter
from ..canonical.conversation import GenerationRequest, Message, TextPart
from ..canonical.events import Error, TextDelta, Usage
from ..operations import tracing

log = logging.getLogger(__name__)

SUMMARY_PROMPTS = {
    "concise": "Summarize the reasoning below in one or two sentences.",
    "auto": "Summarize the reasoning below in a short paragraph.",
    "detailed": "Summarize the reasoning below in a detailed paragraph that keeps every step that matters.",
}
_SUMMARY_STYLE = (
    " Write in the first person, as the one who reasoned, in plain prose without headings. "
    "Reply with the summary only."
)

COMPACTION_PROMPT = (
    "You are compacting a conversation so that it can continue in a fresh, smaller context. Write a "
    "summary of the transcript below that keeps everything needed to continue: the user's goals and "
    "requests (the latest one in full), decisions taken, facts learned, results of tool calls that "
    "matter (paths, names, numbers, errors), the current state of the work and what remains to do. "
    "Be complete but concise. Reply with the summary only."
)
NO_SUMMARY = "The model returned no summary to compact the conversation with."


async def ask(
    router: ModelRouter, model: str, instruction: str, text: str, max_tokens: int = 2048
) -> AsyncIterator[str | Usage]:
    """Stream a model's answer to one instruction about one text (its visible answer, then its usage).

    A failure ends the stream early with a warning: what this feeds is optional extra.
    """
    upstream, upstream_model = await router.resolve(model)
    async for event in tracing.generate(upstream, instruction_request(upstream_model, instruction, text, max_tokens)):
        if isinstance(event, TextDelta):
            yield event.text
        elif isinstance(event, Usage):
            yield event
        elif isinstance(event, Error):
            log.warning("model %s could not answer a %s request: %s", model, instruction[:40], event.message)
            return


def instruction_request(model: str, instruction: str, text: str, max_tokens: int = 2048) -> GenerationRequest:
    """One instruction about one text, for a model already routed (`model` is the engine's name)."""
    return GenerationRequest(
        model=model,
        messages=[Message("system", [TextPart(instruction)]), Message("user", [TextPart(text)])],
        max_output_tokens=max_tokens,
        reasoning_effort="none",
    )


async def summarize_reasoning(router: ModelRouter, model: str, detail: str, reasoning: str) -> AsyncIterator[str]:
    prompt = SUMMARY_PROMPTS.get(detail, SUMMARY_PROMPTS["auto"]) + _SUMMARY_STYLE
    async for piece in ask(router, model, prompt, reasoning, max_tokens=512):
        if isinstance(piece, str):
            yield piece


async def compaction_summary(router: ModelRouter, model: str, messages: Iterable[Message]) -> tuple[str, Usage]:
    """A summary of a conversation, and the tokens it took."""
    parts: list[str] = []
    usage = Usage(0, 0)
    async for piece in ask(router, model, COMPACTION_PROMPT, transcript(messages)):
        if isinstance(piece, Usage):
            usage = piece
        else:
            parts.append(piece)
    return "".join(parts).strip(), usage


def compaction_request(model: str, messages: Iterable[Message]) -> GenerationRequest:
    """The request that summarizes a conversation, for a model already routed: the generation
    that answers a `compaction_trigger` is this one (`Orchestrator.prepare`)."""
    return instruction_request(model, COMPACTION_PROMPT, transcript(messages))


def transcript(messages: Iterable[Message]) -> str:
    """A conversation as plain text, for a model to read."""
    lines: list[str] = []
    for message in messages:
        if message.role in ("system", "developer"):
            lines.append(f"[Instructions]\n{message.text()}")
        elif message.role == "user":
            lines.append(f"[User]\n{message.text()}")
        elif message.role == "assistant":
            if message.reasoning:
                lines.append(f"[Assistant's reasoning]\n{message.reasoning}")
            if message.text():
                lines.append(f"[Assistant]\n{message.text()}")
            lines += [f"[Assistant calls {call.name}]\n{call.arguments}" for call in message.tool_calls]
        else:
            lines.append(f"[Result of call {message.tool_call_id}]\n{message.text()}")
    return "\n\n".join(lines)
