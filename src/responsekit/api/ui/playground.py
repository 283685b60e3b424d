"""`/ui/playground`: a page where a person chats with any served model through the Responses API.

The browser holds the inspector's session cookie, never an API key, so the page cannot call
`POST /v1/responses` itself. It posts to `POST /ui/playground/responses` instead, which answers
for the session's owner by the very code of `POST /v1/responses` (`create_for`): same body
checks, same orchestrator, same stream, same storage. Only how the owner is proven differs, and
`/v1/responses` keeps its bearer-key authorization unchanged.

A cookie is sent by the browser on its own, so this route must refuse requests another site
makes it send (cross-site request forgery). It takes a request only when all of these hold:

- it carries `PLAYGROUND_HEADER`: a page can set a custom header on another origin only after
  a CORS preflight, which this server never grants (it has no CORS middleware), and an HTML form
  cannot set one at all (https://developer.mozilla.org/en-US/docs/Glossary/Preflight_request);
- its `Origin`, when sent, names this server, and its `Sec-Fetch-Site`, when sent, is
  `same-origin` (https://owasp.org/www-community/attacks/csrf, "Verifying origin with standard
  headers"; https://www.w3.org/TR/fetch-metadata/);
- without keys (loopback only, and no session to steal), the `Host` it was sent to is a loopback
  name or address, so a page on another name that resolves to 127.0.0.1 (DNS rebinding) is
  refused even though the browser takes it for same-origin.

With keys, the cookie is also `SameSite=Strict` and `HttpOnly` (`routes.login`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...canonical.errors import APIError
from ..responses.routes import create_for
from .access import Refused, loopback, viewer
from .routes import Viewer

router = APIRouter(prefix="/ui/playground", include_in_schema=False)

PLAYGROUND_HEADER = "x-responsekit-playground"
"""The header `static/playground.js` sends with every request (its value is not checked)."""


@router.get("")
async def playground(view: Viewer) -> Response:
    model_router = view.request.app.state.router
    models = [model["id"] for model in model_router.list_models()]
    chosen = (
        model_router.default_model
        if model_router.default_model in models
        else (models[0] if models else None)
    )
    return view.page("playground.html", models=models, chosen=chosen,
                     max_bytes=view.request.app.state.settings.max_body_bytes)  # fmt: skip


@router.post("/responses")
async def respond(request: Request) -> Response:
    """`POST /v1/responses` as the session's owner, for the playground's page only."""
    try:
        owner = viewer(request)
    except Refused:
        raise APIError(403, "No API keys are configured, so the playground answers only on this machine (loopback).",
                       code="loopback_only") from None  # fmt: skip
    if owner is None:
        raise APIError(401, "Log in at /ui/login first: the playground acts for the session's API key.",
                       code="not_logged_in")  # fmt: skip
    check_same_origin(request)
    return await create_for(request, owner)


def check_same_origin(request: Request) -> None:
    """Refuse a request another site's page could have made the browser send (see the module)."""
    headers = request.headers
    host = headers.get("host", "")
    forged = APIError(403, "This route serves the playground's page only (a same-origin request with "
                           f"the {PLAYGROUND_HEADER} header).", code="cross_origin_refused")  # fmt: skip
    if PLAYGROUND_HEADER not in headers:
        raise forged
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != host:
        raise forged
    if headers.get("sec-fetch-site", "same-origin") != "same-origin":
        raise forged
    if not request.app.state.keys.required and not loopback(urlsplit(f"//{host}").hostname):
        raise forged
