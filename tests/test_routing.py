"""The app's router answers every path as FastAPI's router alone would, with the route that took
a method and path remembered (`api/routing.py`, `RouteMemo`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from responsekit.api.routing import RouteMemo
from responsekit.app import create_app
from responsekit.config import Settings

from .harness import ScriptedUpstream, serve, text_exchange

ASKED: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/chat/completions", {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/chat/completions", {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/responses", {"model": "test-model", "input": "hi", "store": False}),
    ("POST", "/v1/v1/messages", {"model": "test-model", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1beta/models/test-model:generateContent", {"contents": [{"parts": [{"text": "hi"}]}]}),
    ("POST", "/v1/messages/count_tokens", {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/test-model", None),
    ("GET", "/v1beta/models/test-model", None),
    ("GET", "/v1/responses/resp_nothere", None),
    ("GET", "/v1/chat/completions", None),  # 405: a route matches the path, not the method
    ("DELETE", "/v1/messages", None),
    ("GET", "/v1/nowhere", None),  # 404
    ("GET", "/v1/models/", None),  # trailing slash
    ("GET", "/healthz", None),
    ("GET", "/ui/static/nothere.css", None),  # a mount
]


def _answers(url: str) -> list[tuple[int, Any]]:
    """Each request's status and body (JSON with its ids and times left out, else the text), asked twice."""
    seen = []
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as client:
        for _ in range(2):
            for method, path, body in ASKED:
                answer = client.request(method, path, json=body)
                seen.append((answer.status_code, _stable(answer)))
    return seen


def _stable(answer: httpx.Response) -> Any:
    if not answer.headers.get("content-type", "").startswith("application/json"):
        return answer.headers.get("location") or answer.text[:200]
    unstable = {"id", "created", "created_at", "completed_at", "responseId", "request_id", "system_fingerprint"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items() if key not in unstable}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    return strip(answer.json())


def test_the_remembered_route_is_the_one_the_router_chooses(upstream: ScriptedUpstream, settings: Settings) -> None:
    upstream.responder = lambda body: text_exchange("hello")
    remembering = create_app(settings)
    assert isinstance(remembering.router.middleware_stack, RouteMemo)
    plain = create_app(settings)
    plain.router.middleware_stack = plain.router.middleware_stack.app  # FastAPI's router alone
    with serve(remembering) as url:
        remembered = _answers(url)
    with serve(plain) as url:
        expected = _answers(url)
    assert remembered == expected
    statuses = {status for status, _ in remembered}
    assert {200, 404, 405} <= statuses
    memo = remembering.router.middleware_stack
    assert ("POST", "", "/v1/chat/completions") in memo._alone
    assert ("GET", "", "/v1/nowhere") not in memo._alone  # no route: nothing to remember


def test_remembers_a_bounded_number_of_paths(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(settings)
    memo = app.router.middleware_stack
    monkeypatch.setattr(memo, "SIZE", 5)
    with serve(app) as url:
        for number in range(20):
            answer = httpx.get(f"{url}/v1/responses/resp_{number}")
            assert answer.status_code == 404 and answer.json()["error"]["code"] is not None
    assert len(memo._alone) == 5


def test_a_route_added_later_is_found(settings: Settings) -> None:
    app = create_app(settings)
    with serve(app) as url:
        assert httpx.get(f"{url}/v1/added").status_code == 404

        @app.get("/v1/added")
        async def added() -> dict[str, str]:
            return {"added": "yes"}

        assert httpx.get(f"{url}/v1/added").json() == {"added": "yes"}
