"""The one path every generation takes, whatever protocol asked for it.

A frontend translates its client's request into a canonical `GenerationRequest` with the
server-run tools it asked for (`ServerToolSpecs`), and renders the canonical events it gets
back. In between, in this order and only here: the model is routed, the server-run tools are
prepared and offered (file_search, web search and fetch, tool search, MCP), attachments become what the model
reads, the prompt is counted when the frontend needs the count, the request is admitted under
its key's limits and given its place at a busy engine, and the generations run with the
server-run tools in between (`tool_loop.py`). The Responses API layers its stored state on
top (`orchestrator.py`), calling the same steps (docs/architecture.md, One path).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends import Backend
from ..backends.fairness import Busy
from ..backends.router import ModelRouter
from ..backends.windows import prompt_may_overflow, room_left
from ..canonical.conversation import GenerationRequest, NamedToolChoice, TextPart
from ..canonical.errors import APIError, ContextOverflow
from ..canonical.events import Event
from ..canonical.server_tools import NAMESPACE, ServerToolSpecs
from ..canonical.toolset import ToolOrigin, ToolSet
from ..containers.service import Containers
from ..files.service import VectorStores
from ..operations.logs import current
from ..operations.metrics import Observation, Observer
from ..store.api_keys import ApiKey
from ..store.usage import UsageRecord
from ..tools import ServerTools
from ..tools.code_execution import add_code_execution
from ..tools.file_search import add_file_search
from ..tools.mcp import McpServer, add_mcp_servers
from ..tools.outbound import UrlPolicy
from ..tools.tool_search import add_tool_search
from ..tools.web import WebSearch
from ..tools.web.fetch_tool import add_web_fetch, context_urls
from ..tools.web.tool import add_web_search
from .attachments import Attachments
from .context_editing import AppliedEdit, ContextEdit, apply_edits
from .limits import Limiter, Meter, Refused
from .tool_loop import with_server_tools
from .tool_search import withhold_deferred
from .usage import UsageLedger

log = logging.getLogger(__name__)

Generate = Callable[[GenerationRequest], AsyncIterator[Event]]


@dataclass(slots=True)
class Caller:
    """Who asks for a generation, on which route, and where the answer's headers go."""

    owner: str
    """The hash of the caller's key ("" without keys): what it owns, and whose limits count."""
    key: ApiKey | None
    """The stored key, with its limits and weight; None for a configured key or none."""
    route: str
    """The route template, as usage records and metrics name it (`/v1/messages`)."""
    observation: Observation | None = None
    body_bytes: int | None = None
    """The request body's size, which the token estimate of an admission starts from; None: its
    `content-length` among `raw_headers`, read only when a limit needs it (`size`)."""
    busy_status: int = 429
    """The status of a refusal at a busy engine: 529 `overloaded_error` on the Messages API."""
    headers: dict[str, str] = field(default_factory=dict)
    """Headers for the answer (rate limits, `retry-after`), whatever it turns out to be."""
    raw_headers: Sequence[tuple[bytes, bytes]] = ()
    """The request's headers as the ASGI server gave them."""

    def size(self) -> int:
        if self.body_bytes is None:
            length = next((value for name, value in self.raw_headers if name == b"content-length"), b"")
            self.body_bytes = int(length) if length.isdigit() else 0
        return self.body_bytes


@dataclass(slots=True)
class Turn:
    """A generation request on its way: routed, its server tools offered, then ready to generate."""

    generation: GenerationRequest
    upstream: Backend
    toolset: ToolSet
    server_tools: ServerTools
    specs: ServerToolSpecs | None
    mcp_servers: dict[str, McpServer] | None = None
    """The MCP servers by label, when the request asked for any."""
    observer: Observer | None = None
    """What watches the generation (`rendering.rendered`): its `Meter`, or the metrics' observation."""
    input_tokens: int | None = None
    """The prompt's tokens, when the frontend asked for them (`count_prompt`)."""
    clamped: int | None = None
    """The output maximum used instead of one the context had no room for."""
    context_edits: list[AppliedEdit] = field(default_factory=list)
    """The context edits that cleared part of the history (`edit_context`)."""

    @property
    def served(self) -> dict[str, ToolOrigin]:
        """The model-facing names of the tools the server runs, with what each stands for."""
        return {name: origin for name, origin in self.toolset.origins.items() if origin.server_side}


class Pipeline:
    def __init__(
        self,
        router: ModelRouter,
        attachments: Attachments,
        limiter: Limiter,
        usage: UsageLedger | None,
        vector_stores: VectorStores,
        urls: UrlPolicy,
        web: WebSearch | None = None,
        *,
        queue_timeout: float = 30.0,
        max_queue_per_key: int | None = None,
        containers: Containers | None = None,
    ) -> None:
        self.router = router
        self.attachments = attachments
        self.limiter = limiter
        self.usage = usage
        """None when usage is not recorded (`record_usage`)."""
        self.vector_stores = vector_stores
        self.urls = urls
        self.web = web
        """The search engine and page reader the web tools use; None: they are not offered (docs/web-search.md)."""
        self.queue_timeout = queue_timeout
        self.max_queue_per_key = max_queue_per_key
        self.containers = containers
        """Where the code tools run (docs/code-execution.md); None: they are refused (400)."""

    # --- the whole path, for stateless frontends ------------------------------------------

    async def prepare(
        self, generation: GenerationRequest, caller: Caller, specs: ServerToolSpecs | None = None,
        *, count_prompt: bool = False, edits: Sequence[ContextEdit] = (),
    ) -> Turn:  # fmt: skip
        """`generation` (the frontend's, which the pipeline may change in place) routed, with its
        server tools, attachments, context edits and admission: ready to generate."""
        turn = await self.open(generation, specs, caller.owner)
        await self.attach(turn, caller.owner)
        if edits:
            await self.edit_context(turn, edits)
        if count_prompt:
            await self.count_prompt(turn)
        await self.admit(turn, caller)
        return turn

    def events(self, turn: Turn, response_id: str, generate: Generate | None = None) -> AsyncIterator[Event]:
        """The answer's canonical events: generations (`generate`, by default the engine's through
        the attachments' fallback), with the server-run tools in between."""
        if generate is None:
            upstream, attachments = turn.upstream, self.attachments

            def generate(generation: GenerationRequest) -> AsyncIterator[Event]:
                return attachments.generate(upstream, generation, response_id)

        if turn.specs is None or not turn.server_tools.functions:
            return generate(turn.generation)
        return with_server_tools(turn.generation, turn.toolset, turn.server_tools, generate, turn.specs.max_tool_calls)

    async def count_tokens(self, generation: GenerationRequest, owner: str) -> tuple[int, bool]:
        """The prompt's tokens as the routed model reads it, and whether the count is exact."""
        upstream, generation = await self._readable(generation, owner)
        return await upstream.count_tokens(generation)

    async def count_edited(self, generation: GenerationRequest, owner: str,
                           edits: Sequence[ContextEdit]) -> tuple[int, bool, int]:  # fmt: skip
        """`count_tokens` of the history the context `edits` leave (their triggers comparing the
        count before them), and that count before them."""
        upstream, generation = await self._readable(generation, owner)
        original, exact = await upstream.count_tokens(generation)
        if not apply_edits(generation, edits, original):
            return original, exact, original
        count, exact = await upstream.count_tokens(generation)
        return count, exact, original

    async def _readable(self, generation: GenerationRequest, owner: str) -> tuple[Backend, GenerationRequest]:
        """The routed backend, and `generation` as its model reads it (attachments prepared)."""
        upstream, generation.model = await self.router.resolve(generation.model)
        generation = await self.attachments.prepare(upstream, generation, owner)
        withhold_deferred(generation)
        return upstream, generation

    # --- the steps, in this order ---------------------------------------------------------

    async def open(
        self, generation: GenerationRequest, specs: ServerToolSpecs | None, owner: str, toolset: ToolSet | None = None,
        history: list[dict[str, Any]] | None = None,
    ) -> Turn:  # fmt: skip
        """Route the model (set on `generation`, which becomes the turn's) and offer the server-run
        tools beside the client's (`toolset`, else the generation's tools). `history`: the
        conversation so far (stored and given as input), whose MCP listings are reused, and whose
        last live container an auto code container is (`tools/code_execution.py`)."""
        upstream, generation.model = await self.router.resolve(generation.model)
        served = specs is not None and bool(specs)
        if not served:
            specs = None
        offer = toolset is not None or served
        if toolset is None:
            toolset = ToolSet()
            if served:  # named beside the server's functions (a name taken twice is a 400)
                toolset.add([(ToolOrigin("function", tool.name), tool) for tool in generation.tools])
        turn = Turn(generation, upstream, toolset, ServerTools(), specs)
        if specs is not None:
            await self._serve(turn, owner, history or [])
        if offer:
            generation = turn.generation
            generation.tools = toolset.offered()
            if not generation.tools:
                generation.parallel_tool_calls = None
            forced = specs.forced if specs is not None else None
            name = next((name for name, origin in turn.served.items() if origin.name == forced and
                         (origin.namespace == NAMESPACE or origin.kind == "code_execution")), None)  # fmt: skip
            if name is not None:
                generation.tool_choice = NamedToolChoice(name)
        return turn

    async def _serve(self, turn: Turn, owner: str, history: list[dict[str, Any]]) -> None:
        """The server-run tools `turn.specs` asks for, offered beside the client's."""
        specs, server_tools = turn.specs, turn.server_tools
        assert specs is not None
        if specs.mcp:
            turn.mcp_servers = await add_mcp_servers(server_tools, specs.mcp, history, self.urls)
        if specs.file_search is not None:
            position, spec = specs.file_search
            await add_file_search(server_tools, spec, position, owner, self.vector_stores)
        if self.web is not None:
            if specs.web_search is not None:
                add_web_search(server_tools, specs.web_search, self.web)
            if specs.web_fetch is not None:
                texts = [part.text for message in turn.generation.messages if message.role in ("user", "tool")
                         for part in message.content if isinstance(part, TextPart)]  # fmt: skip
                add_web_fetch(server_tools, specs.web_fetch, self.web, context_urls(texts))
        if specs.tool_search is not None:
            add_tool_search(server_tools, specs.tool_search, turn.toolset.functions)
        if specs.code:  # the containers are the key's: another key's is a 404 here
            await add_code_execution(server_tools, specs.code, owner, self.containers, history)
        turn.toolset.add(server_tools.functions)

    async def attach(self, turn: Turn, owner: str) -> None:
        """Images and documents made what the routed model reads (`attachments.py`), and the
        deferred tools no tool search has found yet left out (`tool_search.py`)."""
        turn.generation = await self.attachments.prepare(turn.upstream, turn.generation, owner)
        withhold_deferred(turn.generation)

    async def edit_context(self, turn: Turn, edits: Sequence[ContextEdit]) -> None:
        """Clear what `edits` say from the history the engine gets (`context_editing.py`), their
        triggers comparing the prompt's tokens as `count_prompt` counts them."""
        generation, upstream = turn.generation, turn.upstream
        counted = upstream.counts_locally and upstream.context_window(generation.model) is not None
        tokens = (await upstream.count_tokens(generation))[0] if counted else estimate_tokens(generation)
        turn.context_edits = apply_edits(generation, edits, tokens)
        if counted and not turn.context_edits:  # the history as counted: `count_prompt` need not count it again
            turn.input_tokens = tokens

    async def count_prompt(self, turn: Turn) -> None:
        """The prompt's tokens, and an output maximum clamped to what the context leaves; a prompt
        counted past the model's window is refused before any stream starts (`ContextOverflow`, a
        400 each frontend words as its clients act on: Claude Code compacts by its numbers).

        A backend that counts without asking an engine (an in-process model) counts exactly: a
        maximum above what its window leaves (Claude Code asks 32k-64k) is clamped, logged and said
        in `Turn.clamped`, never refused. An engine behind HTTP would need a request to count: the
        count is estimated unless the prompt may be past the window (`prompt_may_overflow`), and the
        engine's backend fits each generation's maximum to the window itself, counting only when it
        may not fit (`ChatUpstream.fitted`).
        """
        generation, upstream = turn.generation, turn.upstream
        window = upstream.context_window(generation.model)
        if turn.input_tokens is not None:  # counted exactly by `edit_context`, the history unchanged since
            exact = True
        elif window is not None and (upstream.counts_locally or prompt_may_overflow(window, generation)):
            turn.input_tokens, exact = await upstream.count_tokens(generation)
        else:
            turn.input_tokens, exact = estimate_tokens(generation), False
        if exact and window is not None and turn.input_tokens > window:
            raise ContextOverflow(turn.input_tokens, window)
        if window is None or not upstream.counts_locally:
            return
        room = room_left(window, turn.input_tokens, generation.max_output_tokens)
        if room is not None:
            log.info("max output tokens %d is more than the %d tokens model %s has left after the prompt: clamped",
                     generation.max_output_tokens, room, generation.model)  # fmt: skip
            generation.max_output_tokens = turn.clamped = room

    async def admit(self, turn: Turn, caller: Caller) -> None:
        """Count the request against its key's limits (429 when over one), take its place at the
        engine when that is busy (`max_concurrency`: `caller.busy_status` when none frees in
        time), and set up its usage record, written when the generation ends (`Meter.end`)."""
        generation, upstream, observed = turn.generation, turn.upstream, caller.observation
        if observed is not None:
            observed.serving(generation.model, upstream.name)
        key, owner = caller.key, caller.owner
        limits = self.limiter.limits_for(key)
        gate = self.router.gate(upstream)
        if self.usage is None and limits is None and gate is None:
            turn.observer = observed  # nothing to count, record or queue for
            return
        info = current.get()
        record = UsageRecord(
            created_ms=int(time.time() * 1000), key_hash=owner, api_key_id=key.id if key is not None else _configured(owner),
            request_id=info.id if info is not None else None, route=caller.route, model=generation.model,
            upstream=upstream.name, input_tokens=0, cached_tokens=0, output_tokens=0, reasoning_tokens=0, status="",
            duration_ms=0,
        )  # fmt: skip
        meter = Meter(observed, self.limiter, None, self.usage, record)
        if info is not None:
            meter.started = info.arrived
        if limits is not None:
            try:
                meter.admission = await self.limiter.admit(owner, limits, caller.size(), generation.max_output_tokens)
            except Refused as refused:
                caller.headers.update(refused.headers)
                meter.inner = None  # the metrics' observation never began: the answer is counted as any other
                meter.end("429")
                raise APIError(429, str(refused), type="requests" if refused.limit in ("rpm", "max_concurrent")
                               else "tokens", code="rate_limit_exceeded") from None  # fmt: skip
            except Exception:  # the database of the counters failed: admit, uncounted
                log.warning("could not count a request against its key's limits; admitted uncounted", exc_info=True)
            else:
                caller.headers.update(meter.admission.headers())
        if gate is not None:
            try:
                meter.place = await gate.acquire(owner, key.weight if key is not None else 1.0, self.queue_timeout,
                                                 self.max_queue_per_key)  # fmt: skip
            except Busy as busy:
                status = caller.busy_status
                meter.inner = None  # the metrics' observation never began: the answer is counted as any other
                meter.end(str(status))
                caller.headers["retry-after"] = str(max(1, round(busy.retry_after)))
                raise APIError(status, str(busy), type="server_error" if status == 529 else "requests",
                               code="engine_overloaded") from None  # fmt: skip
        turn.observer = meter


def estimate_tokens(generation: GenerationRequest) -> int:
    """About four characters a token, over everything the prompt holds."""
    characters = sum(len(m.text()) + len(m.reasoning or "") + sum(len(c.arguments) + len(c.name) for c in m.tool_calls)
                     for m in generation.messages)  # fmt: skip
    characters += sum(len(t.name) + len(t.description or "") + len(str(t.parameters or "")) for t in generation.tools)
    return max(1, characters // 4)


def _configured(owner: str) -> str | None:
    """The usage report's `api_key_id` for a configured key (no id of its own): its hash's start."""
    return f"sha256:{owner[:16]}" if owner else None
