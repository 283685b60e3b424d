"""Schemathesis against ResponseKit's own OpenAPI document: no request it generates gets a 5xx.

Every operation of `/openapi.json` is called with generated requests, valid and not
(request bodies come from the models the routes read by hand, `api/http.json_body`), a
bounded number per operation so that `make test` stays fast. The server stays up throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import ScriptedUpstream, serve, text_exchange

EXAMPLES = 50
"""Generated requests per operation (about 40 operations)."""


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    engine = ScriptedUpstream()
    engine.responder = lambda body: text_exchange("ok")
    data: Path = tmp_path_factory.mktemp("schemathesis")
    with serve(engine.app) as engine_url:
        upstream = UpstreamConfig(name="scripted", base_url=f"{engine_url}/v1", timeout=30)
        app = create_app(Settings(upstreams=[upstream], probe=False, data_dir=data,
                                  database_url=f"sqlite:///{data / 'state.db'}"))  # fmt: skip
        with serve(app) as url:
            yield url


# The document of the app as served (built without starting it: `openapi()` needs no lifespan).
schema = schemathesis.openapi.from_dict(create_app(Settings(probe=False)).openapi())
schema.config.generation.update(modes=list(schemathesis.GenerationMode))  # valid requests and invalid ones


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_get_no_server_error(api_url: str, case: schemathesis.Case) -> None:
    response = case.call(base_url=api_url, timeout=60)
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
    if response.status_code >= 400 and response.headers.get("content-type", [""])[0].startswith("application/json"):
        if case.path.startswith("/v1/messages"):  # Anthropic's envelope on its API
            assert response.json()["type"] == "error" and set(response.json()["error"]) == {"type", "message"}
        elif case.path.startswith("/v1beta/"):  # Google's on the Gemini API
            error = response.json()["error"]
            assert set(error) == {"code", "message", "status"} and error["code"] == response.status_code
        else:
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_openapi_documents_the_bodies_read_by_hand(api_url: str) -> None:
    paths = httpx.get(f"{api_url}/openapi.json").json()["paths"]
    for path in ("/v1/responses", "/v1/chat/completions", "/v1/conversations", "/v1/responses/compact",
                 "/v1/messages", "/v1/messages/count_tokens", "/v1beta/models/{model}:generateContent",
                 "/v1beta/models/{model}:streamGenerateContent", "/v1beta/models/{model}:countTokens"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert {"model", "items", "contents"} & set(body["properties"])
    assert httpx.get(f"{api_url}/health").status_code == 200, "the server is still up"
