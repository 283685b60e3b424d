"""`/ui`: the inspector's pages (issue 16), rendered on the server; one small script follows live runs.

Pages read the store through owner-scoped queries (`Store.listing`, `Store.inspected`), the same
scoping as the API; a live run's events come from the resume stream of background responses
(`Runs.follow`, as `GET /v1/responses/{id}?stream=true` serves them), authorized by the page's
session instead of a bearer header, which `EventSource` cannot send. Nothing here runs on the
path of a generation.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.staticfiles import StaticFiles

from ...record import Recorder
from ...runs import Runs
from ...sse import SSE_DONE
from ...store import Store
from ..streaming import event_stream
from . import view
from .access import COOKIE, SESSION_SECONDS, Refused, session_for, viewer

router = APIRouter(prefix="/ui", include_in_schema=False)
static = StaticFiles(directory=Path(__file__).parent / "static")
"""The stylesheet and the live script, mounted at `/ui/static` by `app.py`."""

PAGE_SIZE = 50
BIGINT = 2**63
"""A cursor's numbers are BIGINT columns: larger ones are no cursor of ours."""
SEQUENCE_MAX = 2**31 - 1
"""Events' sequence numbers are INTEGER columns."""
HEADERS = {
    # Model output is shown on these pages: escaped by the templates, and no inline script may run.
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}

templates = Environment(
    loader=PackageLoader("responsekit.api.ui", "templates"), autoescape=select_autoescape(["html"]),
    trim_blocks=True, lstrip_blocks=True,
)  # fmt: skip
templates.globals.update(
    live=view.live, text_of=view.text_of, preview=view.preview, when=view.when, duration=view.duration,
    pretty=view.pretty, compact=view.compact, statuses=view.STATUSES,
)  # fmt: skip


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(templates.get_template(name).render(**context), status, headers=HEADERS)


def refused() -> HTMLResponse:
    return page("message.html", 403, title="Loopback only",
                message="No API keys are configured, so the inspector answers only on this machine (loopback). "
                        "Configure API keys to look from elsewhere.")  # fmt: skip


def to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?{urlencode({'next': target})}", 303, headers=HEADERS)


def not_found(kind: str, object_id: str) -> HTMLResponse:
    return page("message.html", 404, title="Not found", message=f"No {kind} {object_id} is stored for you.")


def _viewer(request: Request) -> str | Response:
    """The owner whose objects the page shows, or the page to show instead (refused, log in)."""
    try:
        owner = viewer(request)
    except Refused:
        return refused()
    return to_login(request) if owner is None else owner


def _store(request: Request) -> Store:
    return request.app.state.store


@router.get("")
async def listing(request: Request) -> Response:
    owner = _viewer(request)
    if isinstance(owner, Response):
        return owner
    query = request.query_params
    kind = query.get("kind") if query.get("kind") in ("response", "conversation") else None
    model = query.get("model") or None
    status = query.get("status") if query.get("status") in view.STATUSES else None
    before = None
    if cursor := query.get("before"):
        created, _, rest = cursor.partition(".")
        stored, _, last_id = rest.partition(".")
        if not (created.isdigit() and stored.isdigit() and last_id and int(created) < BIGINT and int(stored) < BIGINT):
            return page("message.html", 400, title="Bad page", message="This page's `before` cursor is malformed.")
        before = (int(created), int(stored), last_id)
    store = _store(request)
    rows = await store.listing(owner, kind=kind, model=model, status=status, before=before, limit=PAGE_SIZE)
    filters = {key: value for key, value in (("kind", kind), ("model", model), ("status", status)) if value}
    older = None
    if rows.has_more:
        older = "/ui?" + urlencode({**filters, "before": ".".join(map(str, rows.data[-1]["cursor"]))})
    return page(
        "list.html", rows=rows.data, models=await store.models(owner), filters=filters, older=older,
        paged=before is not None, keys=bool(request.app.state.owners),
    )  # fmt: skip


@router.get("/login")
async def login_form(request: Request, next: str = "/ui") -> Response:
    if not request.app.state.owners:
        return RedirectResponse("/ui", 303)
    return page("login.html", target=_local(next), failed=False)


@router.post("/login")
async def login(request: Request) -> Response:
    if not request.app.state.owners:
        return RedirectResponse("/ui", 303)
    form = await request.form()
    key, target = str(form.get("key") or ""), _local(str(form.get("next") or "/ui"))
    session = session_for(request, key)
    if session is None:
        return page("login.html", 401, target=target, failed=True)
    answer = RedirectResponse(target, 303, headers=HEADERS)
    answer.set_cookie(COOKIE, session, max_age=SESSION_SECONDS, path="/ui", httponly=True, samesite="strict",
                      secure=request.url.scheme == "https")  # fmt: skip
    return answer


@router.post("/logout")
async def logout(request: Request) -> Response:
    answer = RedirectResponse("/ui/login", 303, headers=HEADERS)
    answer.delete_cookie(COOKIE, path="/ui")
    return answer


@router.get("/responses/{response_id}")
async def response_page(request: Request, response_id: str) -> Response:
    owner = _viewer(request)
    if isinstance(owner, Response):
        return owner
    store = _store(request)
    inspected = await store.inspected(owner, response_id)
    if inspected is None:
        return not_found("response", response_id)
    response = inspected.response
    stored_events: list[dict[str, Any]] = []
    if response.get("background") and inspected.timeline is None and not view.live(response):
        stored_events = [json.loads(text) for _, text in await store.events_after(response_id, -1)]
    recorder: Recorder | None = request.app.state.recorder
    recordings = None
    if recorder and inspected.request_id:  # a directory listing and file reads: off the event loop
        recordings = await asyncio.to_thread(recorder.for_request, inspected.request_id)
    return page(
        "response.html", r=response, inspected=inspected, untimed=view.collapsed(stored_events),
        recordings=recordings, recording=recorder is not None, keys=bool(request.app.state.owners),
    )  # fmt: skip


@router.get("/responses/{response_id}/events")
async def live_events(request: Request, response_id: str, after: int = -1) -> Response:
    """A background response's events after `after`, as they happen: the resume stream."""
    try:
        owner = viewer(request)
    except Refused:
        return refused()
    response = await _store(request).get_response(owner, response_id) if owner is not None else None
    if response is None or not response.get("background"):
        return Response(status_code=404, headers=HEADERS)
    runs: Runs = request.app.state.orchestrator.runs

    async def frames() -> Any:
        async for frame in runs.follow(response_id, min(max(after, -1), SEQUENCE_MAX)):
            yield frame
        yield SSE_DONE

    return event_stream(frames())


@router.get("/conversations/{conversation_id}")
async def conversation_page(request: Request, conversation_id: str) -> Response:
    owner = _viewer(request)
    if isinstance(owner, Response):
        return owner
    store = _store(request)
    conversation = await store.get_conversation(owner, conversation_id)
    if conversation is None:
        return not_found("conversation", conversation_id)
    items = await store.conversation_items(conversation_id)
    return page("conversation.html", c=conversation, items=items, keys=bool(request.app.state.owners))


def _local(target: str) -> str:
    """Where to go after logging in: a path of the inspector only (never another site)."""
    return target if target.startswith("/ui") and not target.startswith("//") else "/ui"
