"""`/`: the front door. A browser gets a page saying what runs here and how to connect Codex,
Claude Code and Gemini CLI to it; an API client (no `text/html` in `Accept`) gets the same facts
as a small JSON object, also to `HEAD /`, which clients send to see that a server answers (Claude
Code's warm-up is `HEAD /api/hello`, answered the same).

The facts are the router's `/health` ones (`ModelRouter.health`, `list_models`), less what only
an operator needs (engine addresses, GGUF paths): nothing here is secret or owner-specific, so
the page is public, like `/health`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import __version__
from .http import JSONResponse
from .reference import DOCS
from .ui.routes import page

router = APIRouter(include_in_schema=False)

INSPECTOR = "/ui"
PLAYGROUND = "/ui/playground"
KEY_VARIABLE = "RESPONSEKIT_API_KEY"
"""The environment variable the connect commands shown read the key from, when keys are configured."""


@router.api_route("/", methods=["GET", "HEAD"])
async def front(request: Request) -> Response:
    facts = describe(request)
    if "text/html" in request.headers.get("accept", ""):
        return page(
            "front.html", facts=facts, commands=connect_commands(facts), key_variable=KEY_VARIABLE
        )
    return JSONResponse(facts)


@router.api_route("/api/hello", methods=["GET", "HEAD"])
async def hello(request: Request) -> Response:
    """Claude Code warms its connection with `HEAD {ANTHROPIC_BASE_URL}/api/hello` before its first
    request and ignores the answer (seen with Claude Code 2.1: tests/test_front.py runs it); the
    description, rather than a 404 in the log."""
    return JSONResponse(describe(request))


def describe(request: Request) -> dict[str, Any]:
    """What runs here: version, API base URL, models with their engines and windows, the default
    model's note, links; from the router's health, so `/` and `/health` never disagree."""
    router = request.app.state.router
    health = router.health()
    root = str(request.base_url).rstrip("/")
    shown = ("name", "kind", "reachable", "models")  # not `base_url`: an engine's address or a GGUF's path
    engines = [{key: entry[key] for key in shown} for entry in health["upstreams"]]
    models = [{"id": model["id"], "engine": model["owned_by"], "context_window": model["context_window"],
               "max_output_tokens": model["max_output_tokens"]} for model in router.list_models()]  # fmt: skip
    app = request.app
    links = {
        "api": f"{root}/v1",
        "models": f"{root}/v1/models",
        "health": f"{root}/health",
        "inspector": f"{root}{INSPECTOR}",
        "playground": f"{root}{PLAYGROUND}",
        "docs": f"{root}{DOCS}" if app.openapi_url else None,
        "openapi": f"{root}{app.openapi_url}" if app.openapi_url else None,
    }
    facts: dict[str, Any] = {
        "object": "responsekit.server",
        "name": "ResponseKit",
        "version": __version__,
        "status": health["status"],
        "api_base_url": links["api"],
        "api_keys_required": app.state.keys.required,
        "models": models,
        "engines": engines,
        "links": {name: url for name, url in links.items() if url},
    }
    if "default_model" in health:
        facts["default_model"] = health["default_model"]
    if "message" in health:
        facts["message"] = health["message"]
    return facts


def connect_commands(facts: dict[str, Any]) -> dict[str, str]:
    """The `responsekit connect` commands for this server (`cli/main.py`); with keys, they read
    the key from `KEY_VARIABLE`, so the page never holds one."""
    root = facts["links"]["api"].removesuffix("/v1")
    codex = f"responsekit connect codex --url {root}/v1 --write"
    claude = f"responsekit connect claude --url {root} --write"
    gemini = f"responsekit connect gemini --url {root} --write"
    if facts["api_keys_required"]:
        codex = f"responsekit connect codex --url {root}/v1 --api-key-env {KEY_VARIABLE} --write"
        claude = f'responsekit connect claude --url {root} --api-key "${KEY_VARIABLE}" --write'
        gemini = f'responsekit connect gemini --url {root} --api-key "${KEY_VARIABLE}" --write'
    return {"codex": codex, "claude": claude, "gemini": gemini}
