"""The served models as the Gemini API's `Model` resources (`GET /v1beta/models`, `GET
/v1beta/models/{model}`), and how to tell a Google client on the paths it shares with OpenAI's."""

from __future__ import annotations

from typing import Any

from starlette.requests import HTTPConnection

from ..auth import allow_model

METHODS = ["generateContent", "streamGenerateContent", "countTokens"]
PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


def asks_google(connection: HTTPConnection) -> bool:
    """Whether a request comes from a Google client: its key header or `?key=`, or the SDKs'
    `x-goog-api-client` header (on `/v1/models`, which OpenAI's clients ask too)."""
    headers = connection.headers
    return "x-goog-api-key" in headers or "x-goog-api-client" in headers or "key" in connection.query_params


def model_resource(entry: dict[str, Any]) -> dict[str, Any]:
    """One `/v1/models` entry as a Gemini `Model`, with its window and largest answer as token
    limits when they are known."""
    model: dict[str, Any] = {"name": f"models/{entry['id']}", "displayName": entry["id"],
                             "description": f"{entry['id']}, served by {entry['owned_by']} through ResponseKit",
                             "supportedGenerationMethods": METHODS}  # fmt: skip
    for limit, key in (("inputTokenLimit", "context_window"), ("outputTokenLimit", "max_output_tokens")):
        if entry[key] is not None:
            model[limit] = entry[key]
    return model


def served(connection: HTTPConnection) -> list[dict[str, Any]]:
    """The router's models a request's key may use."""
    models = connection.app.state.router.list_models()
    key = getattr(connection.state, "api_key", None)
    if key is not None and key.models is not None:
        models = [model for model in models if key.allows(model["id"])]
    return models


def model_page(connection: HTTPConnection, page_size: int | None = None,
               page_token: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A `ListModelsResponse`: `pageSize` models from the `pageToken` on (an offset), and the
    token of the next page while there is one."""
    models = served(connection)
    start = int(page_token) if page_token and page_token.isdigit() else 0
    size = min(page_size or PAGE_SIZE, MAX_PAGE_SIZE)
    page: dict[str, Any] = {"models": [model_resource(m) for m in models[start: start + size]]}
    if start + size < len(models):
        page["nextPageToken"] = str(start + size)
    return page


async def one_model(connection: HTTPConnection, name: str) -> dict[str, Any]:
    """The `Model` a name stands for (`models/` prefix or not): a listed model, or any other name
    the router serves (the default model) under that name; 404 when none serves it."""
    name = name.removeprefix("models/")
    allow_model(connection, name)
    for entry in served(connection):
        if entry["id"] == name:
            return model_resource(entry)
    return model_resource(await connection.app.state.router.entry(name))  # 404 when nothing serves it
