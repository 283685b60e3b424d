"""Canonical events -> `chat.completion.chunk`s, and the `chat.completion` they fold into.

Whatever the engine said, reasoning comes out as `reasoning_content` and tool calls as
OpenAI's indexed `tool_calls` deltas. Calls of the tools the server runs (`web_search_options`)
stay out of the client's view; the `[n]` the answer cites become `url_citation` annotations.
"""

from __future__ import annotations

import time
from typing import Any

from ...canonical.errors import error_type_for_status
from ...canonical.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    Usage,
)
from ...canonical.ids import new_id
from ...canonical.server_tools import CITATION


class ChatRenderer:
    def __init__(self, model: str, *, include_usage: bool, server_tools: frozenset[str] = frozenset()) -> None:
        """`server_tools`: the model-facing names of the tools the server runs itself."""
        self.id = new_id("chatcmpl")
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.finished = False
        self.error: Error | None = None
        self.completion: dict[str, Any] | None = None
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._usage: Usage | None = None
        self._server_tools = server_tools
        self._hidden: set[int] = set()
        """Server-run calls of the current generation (not the client's)."""
        self._citations: dict[int, dict[str, Any]] = {}

    def start(self) -> list[dict[str, Any]]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def feed(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, TextDelta):
            self._content.append(event.text)
            return [self._chunk({"content": event.text})]
        if isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
            return [self._chunk({"reasoning_content": event.text})]
        if isinstance(event, ToolCallDelta):
            return self._arguments_delta(event.index, event.arguments) if event.index in self._calls else []
        if isinstance(event, ToolCallStart) and event.name in self._server_tools:
            self._hidden.add(event.index)
            return []
        if isinstance(event, ToolResult):
            self._hidden.discard(event.index)
            self._citations.update((event.data or {}).get("citations") or {})
            return []
        if isinstance(event, ToolCallStart):
            position = len(self._calls)
            self._calls[event.index] = {"id": event.id, "type": "function", "function": {"name": event.name}}
            self._arguments[event.index] = []
            call = {"index": position, "id": event.id, "type": "function",
                    "function": {"name": event.name, "arguments": ""}}  # fmt: skip
            return [self._chunk({"tool_calls": [call]})]
        if isinstance(event, ToolCallEnd):
            if event.index not in self._calls:
                return []
            # A call without arguments: OpenAI sends "{}", and deltas must join to it.
            return self._arguments_delta(event.index, "{}") if not self._arguments.get(event.index) else []
        if isinstance(event, RefusalDelta):
            self._refusal.append(event.text)
            return [self._chunk({"refusal": event.text})]
        if isinstance(event, Usage):  # one per generation: several when server-run tools ran between
            self._usage = event if self._usage is None else Usage(
                self._usage.input_tokens + event.input_tokens, self._usage.output_tokens + event.output_tokens,
                self._usage.cached_tokens + event.cached_tokens, self._usage.reasoning_tokens + event.reasoning_tokens)
            return []
        if isinstance(event, Finish):
            return self._finish(event)
        if isinstance(event, Error):
            return self._fail(event)
        return []

    def _arguments_delta(self, index: int, fragment: str) -> list[dict[str, Any]]:
        if not fragment:
            return []
        self._arguments[index].append(fragment)
        position = list(self._calls).index(index)
        return [self._chunk({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]})]

    def _finish(self, event: Finish) -> list[dict[str, Any]]:
        self.finished = True
        reason = event.reason
        annotations = _annotations("".join(self._content), self._citations) if self._citations else []
        # The SDK's ChoiceDelta has no `annotations`; OpenAI's search models send them in a delta
        # all the same, and clients that know them read them there.
        out = [self._chunk({"annotations": annotations})] if annotations else []
        out.append(self._chunk({}, finish_reason=reason))
        usage = _usage(self._usage)
        if self.include_usage:
            out.append({**self._chunk({}), "choices": [], "usage": usage})
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._content) or None,
            "refusal": "".join(self._refusal) or None,
        }
        if annotations:
            message["annotations"] = annotations
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": "".join(self._arguments[index])}}
                for index, call in self._calls.items()
            ]
        self.completion = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}],
            "usage": usage,
        }
        return out

    def _fail(self, error: Error) -> list[dict[str, Any]]:
        self.finished = True
        self.error = error
        return [{"error": {"message": error.message, "type": error_type_for_status(error.status),
                           "param": None, "code": error.code}}]  # fmt: skip

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
        }




def _annotations(text: str, citations: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each `[n]` in `text` naming a web result, as Chat Completions' `url_citation`."""
    out = []
    for match in CITATION.finditer(text):
        source = citations.get(int(match.group(1)))
        if source is not None and "url" in source:
            out.append({"type": "url_citation", "url_citation": {"start_index": match.start(), "end_index": match.end(),
                                                                 "title": source["title"], "url": source["url"]}})  # fmt: skip
    return out


def _usage(usage: Usage | None) -> dict[str, Any]:
    usage = usage or Usage(0, 0)
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }
