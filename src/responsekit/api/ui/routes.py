"""`/ui`: the inspector's pages, rendered on the server; one small script follows live runs.

Pages read the store through owner-scoped queries (`Store.listing`, `Store.inspected`), the same
scoping as the API, and this process's foreground responses in flight (`Flights`), which are
stored only at their end. A live run's events come from the resume stream of background responses
(`Runs.follow`, as `GET /v1/responses/{id}?stream=true` serves them) or from a flight
(`Flight.follow`), authorized by the page's session instead of a bearer header, which
`EventSource` cannot send. Every page but the login goes through `viewing` (the `Viewer`
dependency). Nothing here runs on the path of a generation but while a page follows it.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.staticfiles import StaticFiles

from ...canonical.sse import SSE_DONE
from ...operations.record import Recorder
from ...orchestration.flights import Flights
from ...orchestration.runs import Runs
from ...store import Inspected, Store
from ...store.usage import buckets as usage_buckets
from ..streaming import event_stream
from . import view as views
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
    live=views.live, text_of=views.text_of, preview=views.preview, when=views.when, duration=views.duration,
    pretty=views.pretty, compact=views.compact, statuses=views.STATUSES,
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


class Shown(Exception):
    """A page shown instead of the one asked for: access refused, or log in first (`viewing`)."""

    def __init__(self, response: Response) -> None:
        self.response = response


async def shown(request: Request, exc: Exception) -> Response:
    """The handler `app.py` installs for `Shown`."""
    assert isinstance(exc, Shown)
    return exc.response


@dataclass(slots=True)
class View:
    """A page being made for the owner whose objects it shows."""

    request: Request
    owner: str

    @property
    def store(self) -> Store:
        return self.request.app.state.store

    @property
    def flights(self) -> Flights:
        return self.request.app.state.orchestrator.flights

    def page(self, name: str, **context: Any) -> HTMLResponse:
        """A page with the context every page has: whether keys are configured (a log out button)."""
        return page(name, keys=self.request.app.state.keys.required, **context)


def viewing(request: Request) -> View:
    """Every page's access check: the owner whose objects it shows, else the page to show instead."""
    try:
        owner = viewer(request)
    except Refused:
        raise Shown(refused()) from None
    if owner is None:
        raise Shown(to_login(request))
    return View(request, owner)


Viewer = Annotated[View, Depends(viewing)]


@router.get("")
async def listing(view: Viewer) -> Response:
    query = view.request.query_params
    kind = query.get("kind") if query.get("kind") in ("response", "conversation") else None
    model = query.get("model") or None
    status = query.get("status") if query.get("status") in views.STATUSES else None
    before = None
    if cursor := query.get("before"):
        created, _, rest = cursor.partition(".")
        stored, _, last_id = rest.partition(".")
        if not (created.isdigit() and stored.isdigit() and last_id and int(created) < BIGINT and int(stored) < BIGINT):
            return page("message.html", 400, title="Bad page", message="This page's `before` cursor is malformed.")
        before = (int(created), int(stored), last_id)
    # This process's foreground responses in flight (not stored yet) open the first page; read
    # before the store, so that one stored meanwhile is listed once, stored.
    flights = [] if before is not None or kind == "conversation" else view.flights.of(view.owner)
    rows = await view.store.listing(view.owner, kind=kind, model=model, status=status, before=before, limit=PAGE_SIZE)
    stored = {row["id"] for row in rows.data}
    listed = [
        _flight_row(f.response) for f in flights if f.response["id"] not in stored
        and model in (None, f.response.get("model")) and status in (None, f.response["status"])
    ] + rows.data  # fmt: skip
    models = {*await view.store.models(view.owner), *view.flights.models(view.owner)}
    filters = {key: value for key, value in (("kind", kind), ("model", model), ("status", status)) if value}
    older = None
    if rows.has_more:
        older = "/ui?" + urlencode({**filters, "before": ".".join(map(str, rows.data[-1]["cursor"]))})
    return view.page("list.html", rows=listed, models=sorted(models), filters=filters, older=older,
                     paged=before is not None)  # fmt: skip


def _flight_row(response: dict[str, Any]) -> dict[str, Any]:
    """A response in flight as a row of the list (`Store.listing`'s shape): live, nothing timed yet."""
    return {"kind": "response", "id": response["id"], "created_at": response["created_at"],
            "status": response["status"], "model": response.get("model"), "background": False,
            "body": response, "timeline": None, "in_flight": True}  # fmt: skip


USAGE_WIDTHS = {"1m": 60, "1h": 3600, "1d": 86400}
USAGE_BUCKETS = 30


@router.get("/usage")
async def usage_page(view: Viewer, width: str = "1h") -> Response:
    """Tokens per model over the last 30 buckets of a minute, an hour or a day, with a chart: the
    viewer's own key's (per model), or with no keys, everyone's (per key and model)."""
    if width not in USAGE_WIDTHS:
        return page("message.html", 400, title="Bad width", message="`width` is 1m, 1h or 1d.")
    seconds = USAGE_WIDTHS[width]
    end = (int(time.time()) // seconds + 1) * seconds
    start = end - USAGE_BUCKETS * seconds
    keyed = view.request.app.state.keys.required
    found = await usage_buckets(view.store.database, start, end, seconds, ["model"] if keyed else ["api_key_id", "model"],
                                key_hash=view.owner if keyed else None)  # fmt: skip
    chart = views.usage_chart(found, start, seconds, USAGE_BUCKETS)
    return view.page("usage.html", chart=chart, width=width, widths=list(USAGE_WIDTHS), keyed=keyed,
                     totals=views.usage_totals(found))  # fmt: skip


@router.get("/login")
async def login_form(request: Request, next: str = "/ui") -> Response:
    if not request.app.state.keys.required:
        return RedirectResponse("/ui", 303)
    return page("login.html", target=_local(next), failed=False)


@router.post("/login")
async def login(request: Request) -> Response:
    if not request.app.state.keys.required:
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
async def response_page(view: Viewer, response_id: str) -> Response:
    store = view.store
    flight = view.flights.get(view.owner, response_id)  # before the store: it lands once stored
    if flight is not None:
        previous = flight.response.get("previous_response_id")
        chain = await store.chain(view.owner, previous) if previous else []
        inspected: Inspected | None = Inspected({**flight.response}, flight.inputs, chain, flight.request_id, None)
    else:
        inspected = await store.inspected(view.owner, response_id)
    if inspected is None:
        return not_found("response", response_id)
    response = inspected.response
    stored_events: list[dict[str, Any]] = []
    if response.get("background") and inspected.timeline is None and not views.live(response):
        stored_events = [json.loads(text) for _, text in await store.events_after(response_id, -1)]
    recorder: Recorder | None = view.request.app.state.recorder
    recordings = None
    if recorder and inspected.request_id:  # a directory listing and file reads: off the event loop
        recordings = await asyncio.to_thread(recorder.for_request, inspected.request_id)
    return view.page(
        "response.html", r=response, inspected=inspected, untimed=views.collapsed(stored_events),
        recordings=recordings, recording=recorder is not None, in_flight=flight is not None,
        images=view.request.app.state.router.images(str(response.get("model") or "")),
    )  # fmt: skip


@router.get("/responses/{response_id}/events")
async def live_events(request: Request, response_id: str, after: int = -1) -> Response:
    """A live response's events after `after`, as they happen: a background run's resume stream,
    or a foreground response's flight (the events so far as one snapshot, then each as it comes)."""
    try:
        owner = viewer(request)
    except Refused:
        return refused()
    if owner is None:
        return Response(status_code=404, headers=HEADERS)
    orchestrator = request.app.state.orchestrator
    flight = orchestrator.flights.get(owner, response_id)
    if flight is not None:
        return event_stream(flight.follow(), end=SSE_DONE)
    response = await orchestrator.store.get_response(owner, response_id)
    if response is None or not response.get("background"):
        return Response(status_code=404, headers=HEADERS)
    runs: Runs = orchestrator.runs
    return event_stream(runs.follow(response_id, min(max(after, -1), SEQUENCE_MAX)), end=SSE_DONE)


@router.get("/conversations/{conversation_id}")
async def conversation_page(view: Viewer, conversation_id: str) -> Response:
    conversation = await view.store.get_conversation(view.owner, conversation_id)
    if conversation is None:
        return not_found("conversation", conversation_id)
    items = await view.store.conversation_items(conversation_id)
    sources = await view.store.item_sources(view.owner, conversation_id)
    return view.page("conversation.html", c=conversation, items=items, sources=sources)


def _local(target: str) -> str:
    """Where to go after logging in: a path of the inspector only (never another site)."""
    return target if target.startswith("/ui") and not target.startswith("//") else "/ui"
