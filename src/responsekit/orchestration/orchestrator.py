"""A Responses request from start to end: the stored state layered on the one pipeline.

The history comes from the store (`previous_response_id`, `conversation`, `item_reference`)
or from a WebSocket's own cache; sealed blobs (reasoning, compaction summaries) are opened
for the model. Routing, server-run tools, attachments, admission and the loop of server-run
tools are the pipeline's (`pipeline.py`), taken in its order. The engine's events pass through
optional stages — a retry with the oldest turns dropped (`truncation: auto`), reasoning
summaries — into the renderer. The answer is persisted before its terminal event is sent (so
a client's next turn always finds it), or runs in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from ..canonical.conversation import GenerationRequest, Message
from ..canonical.errors import APIError
from ..canonical.events import (
    Error,
    Event,
    ReasoningDelta,
    ReasoningSummaryDelta,
    Usage,
)
from ..canonical.ids import new_id
from ..canonical.server_tools import ServerToolSpecs
from ..canonical.toolset import ToolSet
from ..operations import tracing
from ..operations.logs import request_id
from ..store import MODEL_READ, Store
from ..tools import ServerTools, run_guarded
from ..tools.mcp import McpServer, call_error
from .assist import NO_SUMMARY, compaction_request, compaction_summary, summarize_reasoning
from .flights import Flights
from .history import translate_items
from .items import normalize_items
from .pipeline import Caller, Pipeline, Turn
from .rendering import rendered
from .runs import TERMINAL, ResponseRendering, Run, Runs
from .sealing import Sealer
from .timeline import Timeline

log = logging.getLogger(__name__)

History = dict[str, list[dict[str, Any]]]
"""Response id -> the items a continuation of it builds on (a WebSocket's `store: false` cache)."""


@dataclass(slots=True)
class ResponseRequest:
    """A Responses request as its frontend translated it (`api/responses/request.py`).

    `generation` is the canonical request without its conversation: the model asked for,
    the instructions as its leading messages, the client's tools (`toolset`), tool choice
    and sampling. The orchestrator adds the history, the `input` items and the tools it
    serves, and never reads the client's body (docs/architecture.md, Frontends (`api/`)).
    """

    generation: GenerationRequest
    toolset: ToolSet
    renderer: Callable[[ToolSet], ResponseRendering]
    """The Response's renderer, given every tool the model is offered."""
    input: list[Any]
    previous_response_id: str | None = None
    conversation_id: str | None = None
    store: bool = True
    background: bool = False
    server_tools: ServerToolSpecs = field(default_factory=ServerToolSpecs)
    """The hosted tools the server runs (`file_search`, `mcp`, `web_search` when it has a search
    engine), `max_tool_calls`, and a web search forced by `tool_choice`."""
    truncation: bool = False
    """Retry without the oldest turn when the context overflows (`truncation: auto`)."""
    compact_threshold: int | None = None
    compaction: bool = False
    """Answer with the history's summary sealed into one `compaction` item, not with the model's
    answer (the input ended with a `compaction_trigger`: Codex's remote compaction)."""
    reasoning_summary: str | None = None
    """The detail of the reasoning summaries asked for, if any."""


@dataclass(slots=True)
class Prepared:
    """A request ready to generate."""

    request: ResponseRequest
    owner: str
    history: list[dict[str, Any]]
    inputs: list[dict[str, Any]]
    """The new input items, normalized (with ids), as they are stored."""
    renderer: ResponseRendering
    turn: Turn
    """The generation on the pipeline: routed, its tools offered, its attachments prepared, admitted."""
    timeline: Timeline | None
    """When its events went out, from the request's arrival, stored with the response; None when
    it is not stored (`store: false`), so that nothing is noted per event for nothing."""

    @property
    def response(self) -> dict[str, Any]:
        return self.renderer.response

    def continuation(self) -> list[dict[str, Any]]:
        """The items a next turn continuing this response builds on, as the store gives them
        (`Store.history`: each server-run call with what the model read of it)."""
        reads = self.renderer.reads
        outputs = [{**item, MODEL_READ: reads[item["id"]]} if item["id"] in reads else item
                   for item in self.response["output"]]  # fmt: skip
        return self.history + self.inputs + outputs


def _affinity_key(
    request: ResponseRequest, history: list[dict[str, Any]], inputs: list[dict[str, Any]]
) -> str | None:
    """What ties this request to the earlier ones an engine may still cache (`backends/affinity.py`): the
    client's `prompt_cache_key`, else its conversation, else its `previous_response_id` chain,
    named by the chain's first item. A stored response that starts a chain is named by its own
    first item, which the next turn finds first in its history: so every turn, the first
    included, carries the same key and lands on the same engine."""
    if request.generation.prompt_cache_key:
        return f"prompt_cache_key:{request.generation.prompt_cache_key}"
    if request.conversation_id:
        return f"conversation:{request.conversation_id}"
    chain = history if request.previous_response_id else inputs if _starts_chain(request, inputs) else []
    if chain and chain[0].get("id"):
        return f"chain:{chain[0]['id']}"
    return None


def _starts_chain(request: ResponseRequest, inputs: list[dict[str, Any]]) -> bool:
    """A stored first turn: nothing but messages from its client. A replayed history (earlier
    answers and calls in the input) is left keyless, so it follows the engine holding its prefix."""
    return request.store and all(
        item["type"] == "message" and item.get("role") in ("user", "system", "developer") for item in inputs
    )


class Orchestrator:
    def __init__(
        self,
        pipeline: Pipeline,
        store: Store,
        runs: Runs,
        sealer: Sealer,
        summarizer_model: str | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.store = store
        self.runs = runs
        self.sealer = sealer
        self.summarizer_model = summarizer_model
        self.flights = Flights()

    async def prepare(
        self, request: ResponseRequest, owner: str, cache: History | None = None, caller: Caller | None = None
    ) -> Prepared:
        """The request on the pipeline, with its history; admitted under `caller`'s limits when
        given (a count of input tokens generates nothing, and is not)."""
        timeline = Timeline() if request.store else None  # background runs are stored (a 400 otherwise)
        history = await self._history(request, owner, cache)
        inputs = normalize_items(await self._resolve_references(request.input, owner))
        if request.conversation_id:
            inputs = _new_to_conversation(history, inputs)
        if history:
            _check_tool_outputs(history, inputs)
        pipeline = self.pipeline
        specs = ServerToolSpecs() if request.compaction else request.server_tools
        # A copy: the request's own stays as translated (its leading messages, for compaction).
        turn = await pipeline.open(replace(request.generation), specs, owner, request.toolset, history + inputs)
        if request.compaction:
            await self._summarizing(turn, history + inputs, owner)
        else:
            await self._conversing(turn, request, history, inputs, owner)
        renderer = request.renderer(turn.toolset)
        for item in turn.server_tools.ready_items:
            renderer.add_ready_item(item)
        prepared = Prepared(request, owner, history, inputs, renderer, turn, timeline)
        if not request.compaction:
            await self._compact_if_needed(prepared)
        if caller is not None:
            await pipeline.admit(turn, caller)
        return prepared

    async def _conversing(self, turn: Turn, request: ResponseRequest, history: list[dict[str, Any]],
                          inputs: list[dict[str, Any]], owner: str) -> None:  # fmt: skip
        """The turn's conversation: the history and the input, MCP approvals answered, attachments
        made what the model reads."""
        items = await _answer_approvals(history + inputs, turn.mcp_servers or {}, turn.server_tools)
        turn.generation.messages = self._messages(request, turn.toolset, items)
        turn.generation.tools = turn.toolset.offered()  # with the tools a tool search brought (history.py)
        turn.generation.affinity_key = _affinity_key(request, history, inputs)
        await self.pipeline.attach(turn, owner)

    async def _summarizing(self, turn: Turn, items: list[dict[str, Any]], owner: str) -> None:
        """The turn of a `compaction_trigger`: the model summarizes `items` (the instructions the
        client sends each turn left out), and the renderer seals the summary into the one
        `compaction` item that answers (Codex's remote compaction v2 wants exactly one:
        https://github.com/openai/codex/blob/main/codex-rs/core/src/compact_remote_v2.rs)."""
        messages = await self._readable([item for item in items if not _instructions(item)], owner)
        if not messages:
            raise APIError(400, "Nothing to compact: the input holds no conversation before `compaction_trigger`.",
                           param="input", code="invalid_value")  # fmt: skip
        turn.generation = compaction_request(turn.generation.model, messages)

    async def _readable(self, items: list[dict[str, Any]], owner: str | None) -> list[Message]:
        """`items` as a summarizer reads them: sealed blobs opened, documents and images as text."""
        return await self.pipeline.attachments.in_text(translate_items(self.for_model(items), ToolSet()), owner)

    def _messages(self, request: ResponseRequest, toolset: ToolSet, items: list[dict[str, Any]]) -> list[Message]:
        """The conversation the model reads: the request's leading messages, then `items`."""
        return [*request.generation.messages, *translate_items(self.for_model(items), toolset)]

    async def _history(self, request: ResponseRequest, owner: str, cache: History | None) -> list[dict[str, Any]]:
        if request.previous_response_id:
            if cache is not None and request.previous_response_id in cache:
                return cache[request.previous_response_id]
            history = await self.store.history(owner, request.previous_response_id)
            if history is None:
                raise APIError(
                    404, f"Previous response with id '{request.previous_response_id}' not found.",
                    param="previous_response_id", code="previous_response_not_found",
                )  # fmt: skip
            return history
        if request.conversation_id:
            if await self.store.get_conversation(owner, request.conversation_id) is None:
                raise APIError(404, f"Conversation with id '{request.conversation_id}' not found.",
                               param="conversation", code="conversation_not_found")  # fmt: skip
            return await self.store.conversation_items(request.conversation_id, model_reads=True)
        return []

    async def _resolve_references(self, items: list[Any], owner: str) -> list[Any]:
        """`item_reference`s replaced by the stored items they name (unknown ones are dropped later)."""
        wanted = [i["id"] for i in items if isinstance(i, dict) and i.get("type") == "item_reference" and i.get("id")]
        if not wanted:
            return items
        found = await self.store.find_items(owner, wanted)
        resolved = []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "item_reference":
                if item.get("id") in found:
                    resolved.append(found[item["id"]])
                else:
                    log.warning("skipping input item: item_reference to unknown item %r", item.get("id"))
            else:
                resolved.append(item)
        return resolved

    def for_model(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The items as the model reads them: sealed blobs opened, compacted turns left out.

        The last compaction item that opens stands for what comes before it but what
        `_outlasting` keeps; one that does not open is skipped like any odd item.
        """
        summaries = {
            position: self.sealer.open("compaction", str(item.get("encrypted_content", "")))
            for position, item in enumerate(items)
            if item.get("type") == "compaction"
        }
        last = max((position for position, summary in summaries.items() if summary), default=-1)
        kept = _outlasting(items, last) if last >= 0 else set()
        out = []
        for position, item in enumerate(items):
            kind = item.get("type")
            if position < last and position not in kept:
                continue
            if kind == "compaction":
                if summaries[position]:
                    out.append({"type": "message", "role": "developer",
                                "content": f"Summary of the conversation so far:\n{summaries[position]}"})  # fmt: skip
                continue
            if kind == "reasoning" and not item.get("content") and item.get("encrypted_content"):
                reasoning = self.sealer.open("reasoning", str(item["encrypted_content"]))
                if reasoning:
                    item = {**item, "content": [{"type": "reasoning_text", "text": reasoning}]}
            out.append(item)
        return out

    # --- compaction ---------------------------------------------------------------------

    async def compaction_item(
        self, model: str, items: list[dict[str, Any]], owner: str | None = None
    ) -> tuple[dict[str, Any], Usage]:
        """One compaction item standing for `items`: their summary, sealed (documents and images
        summarized as the text they read as)."""
        summary, usage = await compaction_summary(self.pipeline.router, model, await self._readable(items, owner))
        if not summary:
            raise APIError(502, NO_SUMMARY, type="server_error", code="server_error")
        item = {"type": "compaction", "id": new_id("cmp"), "encrypted_content": self.sealer.seal("compaction", summary)}
        return item, usage

    async def _compact_if_needed(self, prepared: Prepared) -> None:
        """`context_management` compaction: past the threshold, the history is replaced by its summary."""
        threshold = prepared.request.compact_threshold
        if threshold is None or not prepared.history:
            return
        tokens, _ = await prepared.turn.upstream.count_tokens(prepared.turn.generation)
        if tokens <= threshold:
            return
        log.info("compacting the history of %s: %d tokens > %d", prepared.response["id"], tokens, threshold)
        request = prepared.request
        item, _ = await self.compaction_item(request.generation.model, prepared.history + prepared.inputs, prepared.owner)
        instructions = [item for item in prepared.history if _instructions(item)]
        turn = prepared.turn
        turn.generation = replace(turn.generation,
                                  messages=self._messages(request, turn.toolset, [*instructions, item, *prepared.inputs]))
        await self.pipeline.attach(turn, prepared.owner)
        prepared.renderer.add_ready_item(item)

    # --- generation ---------------------------------------------------------------------

    def canonical(self, prepared: Prepared) -> AsyncIterator[Event]:
        """The response's canonical events: generations, with server-run tools in between."""
        if tracing.active is None:
            return self._canonical(prepared)
        attributes = {"gen_ai.request.model": prepared.turn.generation.model, "gen_ai.response.id": prepared.response["id"]}
        if prepared.request.conversation_id:
            attributes["gen_ai.conversation.id"] = prepared.request.conversation_id
        return tracing.orchestrate(self._canonical(prepared), attributes)

    def _canonical(self, prepared: Prepared) -> AsyncIterator[Event]:
        """Generations, with server-run tools in between (the pipeline's loop)."""
        return self.pipeline.events(prepared.turn, prepared.response["id"],
                                    lambda generation: self._generation(prepared, generation))  # fmt: skip

    def _generation(self, prepared: Prepared, generation: GenerationRequest) -> AsyncIterator[Event]:
        """One generation's events through the stages the request asks for, and no others: each
        stage is a generator that every event passes through."""
        if prepared.request.truncation:
            events = self._truncating(prepared, generation)
        else:
            events = self.pipeline.attachments.generate(prepared.turn.upstream, generation, prepared.response["id"])
        detail = prepared.request.reasoning_summary
        if detail and self.summarizer_model:
            events = self._summarized(events, detail)
        return events

    async def _truncating(self, prepared: Prepared, generation: GenerationRequest) -> AsyncIterator[Event]:
        """`truncation: auto`: a context overflow retries without the oldest turns."""
        while True:
            attachments = self.pipeline.attachments.generate(prepared.turn.upstream, generation, prepared.response["id"])
            async with aclosing(attachments) as events:
                first = await anext(events, None)
                if (
                    isinstance(first, Error)
                    and first.code == "context_length_exceeded"
                    and (shorter := _drop_oldest_turn(generation)) is not None
                ):
                    log.info("context overflow: retrying %s without its oldest turn", prepared.response["id"])
                    generation = shorter
                    continue
                if first is not None:
                    yield first
                async for event in events:
                    yield event
                return

    async def _summarized(self, events: AsyncIterator[Event], detail: str) -> AsyncIterator[Event]:
        """Each run of reasoning followed by its summary, before whatever ends it."""
        assert self.summarizer_model is not None
        reasoning: list[str] = []
        async with aclosing(events):
            async for event in events:
                if isinstance(event, ReasoningDelta):
                    reasoning.append(event.text)
                elif reasoning and not isinstance(event, Usage):
                    text, reasoning = "".join(reasoning), []
                    async for piece in summarize_reasoning(self.pipeline.router, self.summarizer_model, detail, text):
                        yield ReasoningSummaryDelta(piece)
                yield event

    # --- in the foreground --------------------------------------------------------------

    def events(self, prepared: Prepared) -> AsyncIterator[dict[str, Any]]:
        """The response's events; it is persisted before its terminal event goes out. One that
        keeps nothing (`store: false` outside a conversation) has nothing to wait for: its events
        are the renderer's, without one more generator for every event to pass."""
        if prepared.timeline is None and not prepared.request.conversation_id:
            return rendered(prepared.renderer, self.canonical(prepared), prepared.turn.observer)
        return self._persisting(prepared)

    async def _persisting(self, prepared: Prepared) -> AsyncIterator[dict[str, Any]]:
        flight = None
        if prepared.timeline is not None:  # stored: the inspector lists it while it runs (`flights.py`)
            flight = self.flights.take_off(
                prepared.owner, prepared.response, prepared.inputs, request_id(), prepared.timeline
            )
        try:
            async for event in rendered(prepared.renderer, self.canonical(prepared), prepared.turn.observer):
                if flight is not None:
                    flight.saw(event)
                if event["type"] in TERMINAL:
                    await self._persist(prepared)
                    if flight is not None:
                        self.flights.land(flight, stored=True)
                yield event
        finally:
            if flight is not None:
                self.flights.land(flight, stored=False)  # its client left, or it could not be stored

    async def _persist(self, prepared: Prepared) -> None:
        conversation = prepared.request.conversation_id
        if prepared.timeline is not None:  # a stored response (`prepare` makes its timeline)
            await self.store.save_response(
                prepared.owner, prepared.response, prepared.inputs, conversation, request_id=request_id(),
                timeline=prepared.timeline.record(), reads=prepared.renderer.reads,
            )
        elif conversation:
            await self.store.add_conversation_items(conversation, prepared.inputs + prepared.response["output"],
                                                    prepared.renderer.reads)  # fmt: skip

    # --- in the background --------------------------------------------------------------

    async def start_background(self, prepared: Prepared) -> Run:
        await self.store.start_response(
            prepared.owner, prepared.response, prepared.inputs, self.runs.lease_until_ms(), request_id=request_id()
        )
        return self.runs.launch(prepared.response["id"], lambda run: self._run(prepared, run))

    async def _run(self, prepared: Prepared, run: Run) -> None:
        renderer, timeline = prepared.renderer, prepared.timeline
        assert timeline is not None, "background responses are stored"

        def publish(event: dict[str, Any]) -> None:
            timeline.saw(event)
            run.publish(event)

        try:
            async for event in rendered(renderer, self.canonical(prepared), prepared.turn.observer):
                publish(event)
                if event["type"] == "response.in_progress":
                    await self.store.update_response(renderer.response)
        except asyncio.CancelledError:
            if run.interrupted:
                ending = renderer.feed(Error("server_error", "The server shut down before this response finished.", 503))
            else:
                ending = renderer.cancel()
            for event in ending:
                publish(event)
        except Exception:
            log.exception("background response %s failed", renderer.response["id"])
            for event in renderer.feed(Error("server_error", "The server had an error while running this response.", 500)):
                publish(event)
        finally:
            run.finishing = True
            async with run.lock:
                events, run.pending = run.pending, []
            finish = self.store.finish_response(
                renderer.response, events, prepared.request.conversation_id, timeline.record(), renderer.reads
            )
            run.stored = await asyncio.shield(finish)  # followers see the end once it is stored


async def _answer_approvals(
    items: list[dict[str, Any]], servers: dict[str, McpServer], server_tools: ServerTools
) -> list[dict[str, Any]]:
    """Run the MCP calls the user approved (`mcp_approval_response`), where their requests stood.

    An approved call becomes an `mcp_call` item opening the output; a declined one tells
    the model it was declined. Returns the items with the requests so answered.
    """
    answers = {
        item.get("approval_request_id"): item for item in items if item.get("type") == "mcp_approval_response"
    }
    if not answers:
        return items
    out = []
    for item in items:
        answer = answers.get(item.get("id")) if item.get("type") == "mcp_approval_request" else None
        if answer is None:
            out.append(item)
            continue
        call = {"id": new_id("mcp"), "type": "mcp_call", "server_label": item.get("server_label"),
                "name": item.get("name"), "arguments": item.get("arguments") or "{}", "approval_request_id": item["id"],
                "output": None, "error": None, "status": "completed"}  # fmt: skip
        server = servers.get(str(item.get("server_label")))
        if answer.get("approve") and server is not None:
            name = str(item.get("name"))
            outcome = await run_guarded(name, partial(server.call, name), call["arguments"])
            error = ((outcome.data or {}).get("error") or call_error(outcome.error)) if outcome.error else None
            call.update(output=outcome.output or None, error=error, status="failed" if error else "completed")
            server_tools.ready_items.append(call)
        else:
            reason = f": {answer['reason']}" if answer.get("reason") else ""
            message = f"The user declined this call{reason}."
            call.update(error=call_error(message, code=-32000), status="failed")
        out.append(call)
    return out


def _outlasting(items: list[dict[str, Any]], compaction: int) -> set[int]:
    """The positions before the compaction item at `compaction` that it does not stand for: the
    instructions (system and developer messages, which clients resend each turn) and, when no user
    message follows the item, the last user message before it, the request at hand. Codex's remote
    compaction keeps the user's messages before the item it got and goes on with the turn from
    there (`build_v2_compacted_history` in
    https://github.com/openai/codex/blob/main/codex-rs/core/src/compact_remote_v2.rs): without that
    message the model would read instructions alone, which some chat templates refuse."""
    kept = {position for position in range(compaction) if _instructions(items[position])}
    if not any(_from_user(item) for item in items[compaction + 1 :]):
        kept.update([position for position in range(compaction) if _from_user(items[position])][-1:])
    return kept


def _instructions(item: dict[str, Any]) -> bool:
    return item.get("type") == "message" and item.get("role") in ("system", "developer")


def _from_user(item: dict[str, Any]) -> bool:
    return item.get("type") == "message" and item.get("role") == "user"


def _new_to_conversation(history: list[dict[str, Any]], inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input items the conversation does not hold yet. A conversation holds each item once:
    one it holds already (sent again, or by `item_reference`) or an earlier input repeats is
    skipped with a warning, like any odd item in a replayed history, rather than failing the request with a 500."""
    seen = {item.get("id") for item in history}
    fresh = []
    for item in inputs:
        if item["id"] in seen:
            log.warning("skipping input item %r: the conversation holds it already", item["id"])
            continue
        seen.add(item["id"])
        fresh.append(item)
    return fresh


def _check_tool_outputs(history: list[dict[str, Any]], inputs: list[dict[str, Any]]) -> None:
    """A continuation's new tool output must answer a call: this input is new, not a replayed history."""
    calls = {item.get("call_id") for item in history + inputs if item.get("type") in ("function_call", "custom_tool_call")}
    for position, item in enumerate(inputs):
        if item.get("type") in ("function_call_output", "custom_tool_call_output") and item["call_id"] not in calls:
            raise APIError(400, f"No tool call found for function call output with call_id {item['call_id']}.",
                           param=f"input[{position}]", code="invalid_value")  # fmt: skip


def _drop_oldest_turn(generation: GenerationRequest) -> GenerationRequest | None:
    """The request without its oldest turn (a user message and what answered it), if one can go.

    Leading instructions stay, and so does the last user turn.
    """
    messages = generation.messages
    first = next((i for i, m in enumerate(messages) if m.role not in ("system", "developer")), None)
    if first is None:
        return None
    end = next((i for i in range(first + 1, len(messages)) if messages[i].role == "user"), None)
    if end is None:
        return None
    return replace(generation, messages=messages[:first] + messages[end:])
