"""A Responses request from start to end: history, translation, routing, generation, persistence.

The history comes from the store (`previous_response_id`, `conversation`, `item_reference`);
the answer is the renderer's event stream, persisted before its terminal event is
sent (so a client's next turn always finds it), or run in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .api.http import rendered
from .api.responses.render import ResponseRenderer
from .api.responses.request import CreateResponse, initial_response, translate
from .backends.chat_upstream import ChatUpstream
from .backends.router import ModelRouter
from .conversation import GenerationRequest
from .errors import APIError
from .events import Error
from .items import normalize_items
from .runs import TERMINAL, Run, Runs
from .store import Store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Prepared:
    """A request ready to generate."""

    body: CreateResponse
    owner: str
    inputs: list[dict[str, Any]]
    """The new input items, normalized (with ids), as they are stored."""
    renderer: ResponseRenderer
    upstream: ChatUpstream
    generation: GenerationRequest

    @property
    def response(self) -> dict[str, Any]:
        return self.renderer.response


class Orchestrator:
    def __init__(self, router: ModelRouter, store: Store, runs: Runs) -> None:
        self.router = router
        self.store = store
        self.runs = runs

    async def prepare(self, body: CreateResponse, owner: str) -> Prepared:
        if body.previous_response_id and body.conversation_id:
            raise APIError(
                400, "Use either `previous_response_id` or `conversation`, not both.", param="conversation",
                code="invalid_value",
            )  # fmt: skip
        if body.background and not body.store:
            raise APIError(400, "Background responses must be stored (`store: true`).", param="background",
                           code="invalid_value")  # fmt: skip
        history = await self._history(body, owner)
        inputs = normalize_items(await self._resolve_references(body.input_items, owner))
        translation = translate(body, history + inputs)
        upstream, translation.generation.model = await self.router.resolve(body.model)
        renderer = ResponseRenderer(initial_response(body, translation.toolset), translation.toolset)
        return Prepared(body, owner, inputs, renderer, upstream, translation.generation)

    async def _history(self, body: CreateResponse, owner: str) -> list[dict[str, Any]]:
        if body.previous_response_id:
            history = await self.store.history(owner, body.previous_response_id)
            if history is None:
                raise APIError(
                    404, f"Previous response with id '{body.previous_response_id}' not found.",
                    param="previous_response_id", code="previous_response_not_found",
                )  # fmt: skip
            return history
        if body.conversation_id:
            if await self.store.get_conversation(owner, body.conversation_id) is None:
                raise APIError(404, f"Conversation with id '{body.conversation_id}' not found.",
                               param="conversation", code="conversation_not_found")  # fmt: skip
            return await self.store.conversation_items(body.conversation_id)
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

    # --- in the foreground --------------------------------------------------------------

    async def events(self, prepared: Prepared) -> AsyncIterator[dict[str, Any]]:
        """The response's events; it is persisted before its terminal event goes out."""
        async for event in rendered(prepared.renderer, prepared.upstream.generate(prepared.generation)):
            if event["type"] in TERMINAL:
                await self._persist(prepared)
            yield event

    async def _persist(self, prepared: Prepared) -> None:
        conversation = prepared.body.conversation_id
        if prepared.body.store:
            await self.store.save_response(prepared.owner, prepared.response, prepared.inputs, conversation)
        elif conversation:
            await self.store.add_conversation_items(conversation, prepared.inputs + prepared.response["output"])

    # --- in the background --------------------------------------------------------------

    async def start_background(self, prepared: Prepared) -> Run:
        await self.store.start_response(prepared.owner, prepared.response, prepared.inputs, self.runs.lease_until())
        return self.runs.launch(prepared.response["id"], lambda run: self._run(prepared, run))

    async def _run(self, prepared: Prepared, run: Run) -> None:
        renderer = prepared.renderer
        try:
            async for event in rendered(renderer, prepared.upstream.generate(prepared.generation)):
                run.publish(event)
                if event["type"] == "response.in_progress":
                    await self.store.update_response(renderer.response)
        except asyncio.CancelledError:
            if run.interrupted:
                ending = renderer.feed(Error("server_error", "The server shut down before this response finished.", 503))
            else:
                ending = renderer.cancel()
            for event in ending:
                run.publish(event)
        except Exception:
            log.exception("background response %s failed", renderer.response["id"])
            for event in renderer.feed(Error("server_error", "The server had an error while running this response.", 500)):
                run.publish(event)
        finally:
            run.finishing = True
            async with run.lock:
                events, run.pending = run.pending, []
            finish = self.store.finish_response(renderer.response, events, prepared.body.conversation_id)
            await asyncio.shield(finish)
