"""`GET /metrics`: the Prometheus exposition after real requests on every frontend,
parsed with prometheus-client's own parser."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import (
    ScriptedUpstream,
    check_chat_completion,
    check_response,
    check_stream,
    read_sse,
    serve,
    slow_exchange,
    text_exchange,
    wait_for,
)
from .test_faults import FAULTS, _body, _push, _upstreams
from .test_messages import HEADERS
from .test_messages import stream as messages_stream

Samples = dict[str, list[tuple[dict[str, str], float]]]

ENGINE_FAULT = {
    "connection_refused": ("dead", "refused"),
    "dropped_mid_stream": ("scripted", "dropped"),
    "stalled_past_timeout": ("scripted", "timeout"),
    "rate_limited_429": ("scripted", "rate_limited"),
    "engine_error_500": ("scripted", "server_error"),
    "malformed_sse": ("scripted", "malformed"),
    "misshapen_chunk": ("scripted", "malformed"),
}


def scrape(url: str, **headers: str) -> Samples:
    answer = httpx.get(f"{url}/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        samples.setdefault(family.name, [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(v for found, v in samples.get(name, []) if labels.items() <= found.items())


def label_values(samples: Samples, label: str) -> set[str]:
    return {found[label] for series in samples.values() for found, _ in series if label in found}


def test_every_frontend_is_counted(server):
    url, upstream = server.url, server.upstream
    upstream.push(*(text_exchange("Hello there, friend.") for _ in range(5)))
    usage: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{url}/v1/responses", json={"model": "test-model", "input": "Hi", "stream": True},
                      timeout=30) as answer:  # fmt: skip
        events, _ = read_sse(answer.iter_lines())
    usage.append(check_stream(events)["usage"])
    plain = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "Hi"}, timeout=30).json()
    usage.append(check_response(plain).model_dump()["usage"])
    chat = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                      json={"model": "test-model", "messages": [{"role": "user", "content": "Hi"}]}).json()  # fmt: skip
    check_chat_completion(chat)
    usage.append({"input_tokens": chat["usage"]["prompt_tokens"], "output_tokens": chat["usage"]["completion_tokens"]})
    request = {"model": "test-model", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}
    delta = messages_stream(url, request)[-2]
    assert delta["type"] == "message_delta"
    usage.append(delta["usage"])
    message = httpx.post(f"{url}/v1/messages", json=request, headers=HEADERS, timeout=30).json()
    usage.append(message["usage"])

    samples = scrape(url)
    for route, count in (("/v1/responses", 2), ("/v1/chat/completions", 1), ("/v1/messages", 2)):
        assert value(samples, "responsekit_requests_total", route=route, model="test-model", status="200") == count
        assert value(samples, "gen_ai_server_request_duration_seconds_count", route=route, model="test-model",
                     status="200") == count  # fmt: skip
        assert value(samples, "gen_ai_server_time_to_first_token_seconds_count", route=route, model="test-model") == count
        assert value(samples, "gen_ai_server_time_per_output_token_seconds_count", route=route) == count
    assert label_values(samples, "route") == {"/v1/responses", "/v1/chat/completions", "/v1/messages"}
    for kind in ("input", "output"):
        assert value(samples, "gen_ai_client_token_usage_sum", model="test-model", gen_ai_token_type=kind) == sum(
            u[f"{kind}_tokens"] for u in usage)
        assert value(samples, "gen_ai_client_token_usage_count", gen_ai_token_type=kind) == 5
    assert value(samples, "gen_ai_server_request_duration_seconds_sum") > 0
    assert samples["responsekit_streams_in_flight"] == [({}, 0.0)]
    assert value(samples, "responsekit_store_seconds_count", operation="transaction") >= 2  # the stored responses
    assert value(samples, "responsekit_store_seconds_count", operation="query") >= 1
    assert value(samples, "responsekit_background_runs", state="running") == 0
    assert value(samples, "responsekit_vector_store_ingestion_queue", state="waiting") == 0
    assert "responsekit_engine_errors_total" not in samples


def test_background_runs_and_open_streams_are_gauged(server):
    url, upstream = server.url, server.upstream
    upstream.time_scale = 1.0
    upstream.push(slow_exchange(40, 0.1), slow_exchange(40, 0.1))
    queued = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "Hi", "background": True}).json()
    assert value(scrape(url), "responsekit_background_runs", state="running") == 1
    httpx.post(f"{url}/v1/responses/{queued['id']}/cancel", timeout=30)
    with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=30, json={"model": "test-model", "stream": True,
                      "messages": [{"role": "user", "content": "Hi"}]}) as answer:  # fmt: skip
        lines = answer.iter_lines()  # kept: a dropped iterator closes the response
        assert next(lines).startswith("data: ")
        samples = scrape(url)
        assert samples["responsekit_streams_in_flight"] == [({}, 1.0)]
        assert value(samples, "responsekit_background_runs") == 0
    # Both ended before their engine did: the cancelled run, the stream whose client left.
    samples = wait_for(lambda: (found := scrape(url)) and value(found, "responsekit_requests_total") == 2 and found)
    assert samples["responsekit_streams_in_flight"] == [({}, 0.0)]
    assert value(samples, "responsekit_requests_total", route="/v1/responses", status="499") == 1
    assert value(samples, "responsekit_requests_total", route="/v1/chat/completions", status="499") == 1


@pytest.fixture
def faulty(upstream: ScriptedUpstream, database_url: str, unused_port: int):
    upstream.time_scale = 1.0
    settings = Settings(upstreams=_upstreams(upstream, unused_port), probe=False, database_url=database_url)
    with serve(create_app(settings)) as url:
        yield url, upstream


def test_engine_faults_by_upstream_and_kind(faulty):
    url, upstream = faulty
    for fault in [*ENGINE_FAULT, "context_overflow_400"]:
        _push(upstream, fault)
        answer = httpx.post(f"{url}/v1/responses", json=_body(fault), timeout=30)
        assert answer.status_code == FAULTS[fault][3]
    samples = scrape(url)
    expected: dict[tuple[str, str], int] = {}
    for where in ENGINE_FAULT.values():
        expected[where] = expected.get(where, 0) + 1
    found = {(labels["upstream"], labels["kind"]): v for labels, v in samples["responsekit_engine_errors_total"]}
    assert found == expected  # the context overflow is the request's fault, not the engine's
    assert value(samples, "responsekit_requests_total", route="/v1/responses", model="dead-model", status="502") == 1
    assert value(samples, "responsekit_requests_total", status="400") == 1
    assert value(samples, "responsekit_requests_total", status="429") == 1
    assert value(samples, "responsekit_requests_total", status="504") == 1


def test_unknown_models_make_no_label_values(upstream, database_url, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path, database_url=database_url, aliases={"gpt-5": "test-model"})  # fmt: skip
    with serve(create_app(settings)) as url:
        for model in ("no-such-model", "another-one"):
            answer = httpx.post(f"{url}/v1/chat/completions", json={"model": model, "messages": [{"role": "user",
                                                                                                   "content": "x"}]})  # fmt: skip
            assert answer.status_code == 404
        upstream.push(text_exchange("Hi"))
        answer = httpx.post(f"{url}/v1/responses", json={"model": "gpt-5", "input": "Hi"}, timeout=30)
        assert answer.status_code == 200
        samples = scrape(url)
    assert label_values(samples, "model") == {"test-model"}


def test_keys_guard_the_endpoint(upstream, database_url, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, data_dir=tmp_path,  # type: ignore[attr-defined]
                        database_url=database_url, api_keys=["sk-ops"])  # fmt: skip
    with serve(create_app(settings)) as url:
        missing = httpx.get(f"{url}/metrics")
        assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
        assert httpx.get(f"{url}/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert "responsekit_requests" in scrape(url, authorization="Bearer sk-ops")


def test_no_metrics(upstream, database_url, tmp_path, monkeypatch):
    monkeypatch.setenv("RESPONSEKIT_METRICS", "false")
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, data_dir=tmp_path,  # type: ignore[attr-defined]
                        database_url=database_url)  # fmt: skip
    assert not settings.metrics
    with serve(create_app(settings)) as url:
        assert httpx.get(f"{url}/metrics").status_code == 404
        upstream.push(text_exchange("Hi"))
        assert httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "Hi"}, timeout=30).status_code == 200


def test_answers_refused_before_any_engine_are_counted(upstream, database_url, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, data_dir=tmp_path,  # type: ignore[attr-defined]
                        database_url=database_url, api_keys=["sk-ops"])  # fmt: skip
    key = {"authorization": "Bearer sk-ops"}
    with serve(create_app(settings)) as url:
        assert httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "Hi"}).status_code == 401
        assert httpx.post(f"{url}/v1/responses", content=b"{not json", headers=key).status_code == 400
        assert httpx.post(f"{url}/v1/responses", json={"model": "nope", "input": "Hi"}, headers=key).status_code == 404
        assert httpx.get(f"{url}/v1/responses/resp_missing", headers=key).status_code == 404
        assert httpx.get(f"{url}/no/such/path/123", headers=key).status_code == 404
        samples = wait_for(lambda: (found := scrape(url, **key)) and "responsekit_http_requests_total" in found and found)
    assert value(samples, "responsekit_http_requests_total", method="POST", route="/v1/responses", status="401") == 1
    assert value(samples, "responsekit_http_requests_total", method="POST", route="/v1/responses", status="400") == 1
    assert value(samples, "responsekit_http_requests_total", method="POST", route="/v1/responses", status="404") == 1
    assert value(samples, "responsekit_http_requests_total", route="/v1/responses/{response_id}", status="404") == 1
    assert value(samples, "responsekit_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert "/no/such/path/123" not in label_values(samples, "route")  # a path never becomes a label value
