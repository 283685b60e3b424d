"""The answer to a `compaction_trigger`: one `compaction` item, the conversation's summary sealed.

Codex's remote compaction (v2) sends its history on a streamed `POST /v1/responses` whose last
input item is `{"type": "compaction_trigger"}`, and fails the turn unless the stream holds exactly
one `compaction` output item before `response.completed` (`collect_compaction_output` in
https://github.com/openai/codex/blob/main/codex-rs/core/src/compact_remote_v2.rs). The item comes
back in a later turn's input, where the orchestrator opens it for the model (`Orchestrator.for_model`).
The generation behind it is the summarizer's (`assist.compaction_request`): its text is the summary,
never an answer of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...canonical.events import Error, Event, Finish, ReasoningDelta, TextDelta, Usage
from ...canonical.ids import new_id
from ...canonical.toolset import ToolSet
from ...orchestration.assist import NO_SUMMARY
from .render import ResponseRenderer


class CompactionRenderer(ResponseRenderer):
    def __init__(
        self, response: dict[str, Any], toolset: ToolSet, *, seal_summary: Callable[[str], str], **options: Any
    ) -> None:
        """`seal_summary` seals the summary into the item's `encrypted_content`."""
        super().__init__(response, toolset, **options)
        self._seal_summary = seal_summary
        self._summary: list[str] = []
        self._item: dict[str, Any] | None = None
        self._index = -1

    def feed(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, (TextDelta, ReasoningDelta)):
            if isinstance(event, TextDelta):
                self._summary.append(event.text)
            return self._compacting()
        if isinstance(event, Finish):
            return self._sealed()
        if isinstance(event, (Usage, Error)):
            return super().feed(event)
        return []  # the summarizer is offered no tool: a call it writes anyway is no summary

    def _compacting(self) -> list[dict[str, Any]]:
        """`response.compaction.compacting` for each piece of the summary sampled, after the item's
        `added`: the stream is never silent for long while the summary is written (Codex gives
        up on a stream silent for its `stream_idle_timeout_ms`, 5 minutes by default)."""
        out: list[dict[str, Any]] = []
        if self._item is None:
            self._item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": ""}
            self._index = self._reserve()
            out.append(self._event("response.output_item.added", output_index=self._index, item=self._item))
        out.append(self._event("response.compaction.compacting", item_id=self._item["id"], output_index=self._index))
        return out

    def _sealed(self) -> list[dict[str, Any]]:
        """The item done with the summary sealed, then `response.completed`; a summary cut at the
        output maximum is still one (the response completes)."""
        summary = "".join(self._summary).strip()
        if self._item is None or not summary:
            return super().feed(Error("server_error", NO_SUMMARY, 502))
        out: list[dict[str, Any]] = []
        self._done(out, self._index, {**self._item, "encrypted_content": self._seal_summary(summary)})
        return out + super().feed(Finish("stop"))
