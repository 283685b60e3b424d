"""Limits per key: requests and tokens per minute, concurrent requests and token budgets, counted in
the shared database; 429 in each protocol's envelope with `Retry-After`; the rate-limit headers the
SDKs read; a burst over two replicas admitted no further than documented (docs/teams.md)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from responsekit.app import create_app
from responsekit.config import LimitsConfig, Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import serve, start_cli, text_exchange, wait_for

ADMIN = "admin-secret"


def _settings(upstream, database_url: str, **options) -> Settings:
    return Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,
                    database_url=database_url, admin_api_keys=[ADMIN], **options)  # fmt: skip


def _key(url: str, **limits) -> str:
    made = httpx.post(f"{url}/admin/v1/api-keys", headers={"Authorization": f"Bearer {ADMIN}"},
                      json={"name": "limited", "limits": limits})  # fmt: skip
    assert made.status_code == 201, made.text
    return made.json()["key"]


def _chat(url: str, key: str, max_tokens: int = 20) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=30,
                      json={"model": "test-model", "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip


def _within_one_minute(needed: float = 15.0) -> None:
    """Wait, if need be, so that the next `needed` seconds lie in one UTC minute (fixed windows)."""
    left = 60 - time.time() % 60
    if left < needed:
        time.sleep(left + 0.05)


def _gated(gate: threading.Event) -> dict:
    exchange = text_exchange("slow")
    exchange["chunks"].insert(1, {"t": 0, "gate": gate})
    return exchange


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_requests_per_minute_with_the_sdks_reading_the_headers_and_errors(upstream, database_url):
    upstream.responder = lambda body: text_exchange("ok")
    with serve(create_app(_settings(upstream, database_url))) as url:
        _within_one_minute()
        secret = _key(url, rpm=3, tpm=100_000)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0)
        remaining = []
        for _ in range(2):
            raw = client.chat.completions.with_raw_response.create(
                model="test-model", messages=[{"role": "user", "content": "x"}], max_tokens=10
            )
            assert raw.parse().choices[0].message.content == "ok"
            assert raw.headers["x-ratelimit-limit-requests"] == "3"
            assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
            assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
            assert raw.headers["anthropic-ratelimit-requests-limit"] == "3"
            remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
        assert remaining == [2, 1]
        claude = anthropic.Anthropic(base_url=url, api_key=secret, max_retries=0)
        raw = claude.messages.with_raw_response.create(model="test-model", max_tokens=10,
                                                       messages=[{"role": "user", "content": "x"}])  # fmt: skip
        assert raw.parse().content[0].text == "ok"
        assert raw.headers["anthropic-ratelimit-requests-remaining"] == "0"
        assert raw.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
        assert int(raw.headers["anthropic-ratelimit-tokens-remaining"]) < 100_000
        for kind in ("input-tokens", "output-tokens"):  # one budget: each says what the tokens say
            for part in ("limit", "remaining", "reset"):
                assert raw.headers[f"anthropic-ratelimit-{kind}-{part}"] == raw.headers[f"anthropic-ratelimit-tokens-{part}"]

        with pytest.raises(openai.RateLimitError) as limited:
            client.responses.create(model="test-model", input="x")
        answer = limited.value.response
        assert limited.value.code == "rate_limit_exceeded" and limited.value.type == "requests"
        assert 1 <= int(answer.headers["retry-after"]) <= 60 and answer.headers["x-ratelimit-remaining-requests"] == "0"
        with pytest.raises(anthropic.RateLimitError) as refused:
            claude.messages.create(model="test-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
        assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "rate_limit_error"
        assert int(refused.value.response.headers["retry-after"]) >= 1
        # Another key is counted apart; a key without limits gets no headers at all.
        other = _key(url, rpm=3)
        assert _chat(url, other).status_code == 200
        free = _key(url)
        assert "x-ratelimit-limit-requests" not in _chat(url, free).headers


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_tokens_are_reserved_from_the_estimate_then_corrected(upstream, database_url):
    gate = threading.Event()
    upstream.push(_gated(gate))
    upstream.responder = lambda body: text_exchange("ok")  # the engine reports 10 + 5 tokens
    with serve(create_app(_settings(upstream, database_url))) as url:
        _within_one_minute()
        secret = _key(url, tpm=1000)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_chat, url, secret, 900)  # reserves ~900 tokens while in flight
            wait_for(lambda: len(upstream.requests) == 1)
            refused = _chat(url, secret, 900)
            assert refused.status_code == 429 and refused.json()["error"]["type"] == "tokens"
            assert refused.headers["x-ratelimit-limit-tokens"] == "1000"
            gate.set()
            assert first.result().status_code == 200
        # Corrected to the 15 tokens used (off the request's path: within moments).
        answer = wait_for(lambda: (a := _chat(url, secret, 900)).status_code == 200 and a)
        assert int(answer.headers["x-ratelimit-remaining-tokens"]) >= 1000 - 900 - 15 - 100


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_concurrent_requests_and_budgets(upstream, database_url):
    gate = threading.Event()
    upstream.push(_gated(gate))
    upstream.responder = lambda body: text_exchange("ok")
    with serve(create_app(_settings(upstream, database_url))) as url:
        secret = _key(url, max_concurrent=1)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_chat, url, secret)
            wait_for(lambda: len(upstream.requests) == 1)
            refused = _chat(url, secret)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert "concurrent" in refused.json()["error"]["message"]
            gate.set()
            assert first.result().status_code == 200
        wait_for(lambda: _chat(url, secret).status_code == 200)

        # A daily budget: each request reserves ~its body / 4 + 20, and uses 15 once corrected.
        budget = _key(url, daily_tokens=200)
        answers = []
        for _ in range(20):
            answers.append(_chat(url, budget))
            if answers[-1].status_code == 429:
                break
            time.sleep(0.1)  # let the correction land
        assert [a.status_code for a in answers[:-1]] == [200] * (len(answers) - 1) and len(answers) > 3
        last = answers[-1]
        assert last.status_code == 429 and "per day" in last.json()["error"]["message"]
        assert int(last.headers["retry-after"]) == pytest.approx(86400 - time.time() % 86400, abs=5)
        assert _key(url, monthly_tokens=10) and _chat(url, _key(url, monthly_tokens=10)).status_code == 429


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_default_limits_hold_configured_keys_and_a_key_s_own_win(upstream, database_url):
    upstream.responder = lambda body: text_exchange("ok")
    settings = _settings(upstream, database_url, api_keys=["configured"], default_limits=LimitsConfig(rpm=2))
    with serve(create_app(settings)) as url:
        _within_one_minute()
        assert [_chat(url, "configured").status_code for _ in range(3)] == [200, 200, 429]
        own = _key(url, rpm=4)
        assert [_chat(url, own).status_code for _ in range(5)] == [200] * 4 + [429]
        defaulted = _key(url, tpm=100_000)
        answers = [_chat(url, defaulted) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert answers[0].headers["x-ratelimit-limit-requests"] == "2"


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_a_burst_over_two_replicas_is_admitted_no_further_than_the_limit(upstream, database_url):
    """Counts are exact across replicas within a window: 40 requests at once, half to each replica,
    against rpm 10: 10 admitted in all, the rest refused with a 429."""
    upstream.responder = lambda body: text_exchange("ok")
    env = {"RESPONSEKIT_ADMIN_API_KEYS": ADMIN}
    replicas = [start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url", database_url,
                          env=env) for _ in range(2)]  # fmt: skip
    try:
        urls = [url for _, url in replicas]
        _within_one_minute(25)
        secret = _key(urls[0], rpm=10)
        wait_for(lambda: _chat(urls[1], secret, 1).status_code == 200)  # the second replica knows the key
        with ThreadPoolExecutor(40) as pool:
            answers = list(pool.map(lambda i: _chat(urls[i % 2], secret), range(40)))
        codes = [a.status_code for a in answers]
        assert codes.count(200) == 9 and codes.count(429) == 31, codes  # 10 minus the one above
        assert all(a.json()["error"]["code"] == "rate_limit_exceeded" for a in answers if a.status_code == 429)
        assert not any(code >= 500 for code in codes)
    finally:
        for process, _ in replicas:
            process.terminate()
            process.wait(10)
