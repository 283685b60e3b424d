"""`GET /v1/models` and `GET /health`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from .auth import Owner
from .gemini.models import asks_google, model_page
from .http import asks_anthropic

api = APIRouter()
health = APIRouter()


@api.get("/models")
async def list_models(request: Request, owner: Owner) -> dict[str, Any]:
    """OpenAI's list, Anthropic's when the request carries `anthropic-version` (Claude Code's
    gateway model discovery), Google's for its clients (the Gemini SDKs with `api_version="v1"`)."""
    if asks_google(request):
        page_size = request.query_params.get("pageSize", "")
        return model_page(request, int(page_size) if page_size.isdigit() else None,
                          request.query_params.get("pageToken"))  # fmt: skip
    models = request.app.state.router.list_models()
    key = getattr(request.state, "api_key", None)
    if key is not None and key.models is not None:  # a key limited to some models sees those only
        models = [model for model in models if key.allows(model["id"])]
    if asks_anthropic(request):
        return anthropic_models(models)
    return {"object": "list", "data": models}


def anthropic_model(model: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's `ModelInfo` of a served model (dates unknown: the epoch, as its API allows),
    with its window as `max_input_tokens` and its largest answer as `max_tokens` (null when
    unknown)."""
    return {"type": "model", "id": model["id"], "display_name": model["id"], "created_at": "1970-01-01T00:00:00Z",
            "lifecycle": "active", "max_input_tokens": model["context_window"],
            "max_tokens": model["max_output_tokens"]}  # fmt: skip


def anthropic_models(models: list[dict[str, Any]]) -> dict[str, Any]:
    """Anthropic's page of the served models, all on one page."""
    data = [anthropic_model(model) for model in models]
    return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}  # fmt: skip


@health.get("/health")
async def check_health(request: Request) -> dict[str, Any]:
    """The engines' state, and whether web search tools are served (and with what, or why not)."""
    body: dict[str, Any] = request.app.state.router.health()
    web = request.app.state.web_search
    body["web_search"] = web.health() if web is not None else {"provider": None, "problem": request.app.state.web_search_off}
    return body
