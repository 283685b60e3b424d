"""Fair sharing of a busy engine (`max_concurrency`): a queue per key, served in turn across keys;
past `queue_timeout`, 429 (529 `overloaded_error` on the Messages API)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import serve, slow_exchange, text_exchange, wait_for


def _settings(upstream, database_url: str, **options) -> Settings:
    return Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url, max_concurrency=2)],
                    probe=False, database_url=database_url, api_keys=["flood", "single"], **options)  # fmt: skip


def _chat(url: str, key: str) -> tuple[int, float]:
    started = time.monotonic()
    answer = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                        json={"model": "test-model", "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    return answer.status_code, time.monotonic() - started


def test_a_key_waiting_goes_before_the_rest_of_a_flood(upstream, database_url):
    upstream.time_scale = 1.0
    upstream.responder = lambda body: slow_exchange(10, 0.08)  # ~1 s each (13 chunks 80 ms apart)
    with serve(create_app(_settings(upstream, database_url))) as url:
        with ThreadPoolExecutor(9) as pool:
            flood = [pool.submit(_chat, url, "flood") for _ in range(8)]
            wait_for(lambda: len(upstream.requests) == 2)  # two running, six of the flood waiting
            time.sleep(0.1)
            status, seconds = _chat(url, "single")
            assert status == 200
            # It went next, as soon as a place freed (within one answer's time), then took its own ~1 s:
            # behind the six of the flood waiting it would have taken three rounds more (~4 s in all).
            assert seconds < 2.5, seconds
            assert [f.result()[0] for f in flood] == [200] * 8
        assert len(upstream.requests) == 9


def test_past_the_queue_timeout_429_and_529_on_messages(upstream, database_url):
    gates = [threading.Event(), threading.Event()]
    for gate in gates:
        held = text_exchange("held")
        held["chunks"].insert(1, {"t": 0, "gate": gate})
        upstream.push(held)
    upstream.responder = lambda body: text_exchange("ok")
    with serve(create_app(_settings(upstream, database_url, queue_timeout=0.5, max_queue_per_key=1))) as url:
        with ThreadPoolExecutor(2) as pool:
            held = [pool.submit(_chat, url, "flood") for _ in range(2)]
            wait_for(lambda: len(upstream.requests) == 2)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="single", max_retries=0)
            with pytest.raises(openai.RateLimitError) as refused:
                client.responses.create(model="test-model", input="x")
            assert refused.value.code == "engine_overloaded" and refused.value.response.headers["retry-after"]
            claude = anthropic.Anthropic(base_url=url, api_key="single", max_retries=0)
            with pytest.raises(anthropic.InternalServerError) as overloaded:
                claude.messages.create(model="test-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
            assert overloaded.value.status_code == 529
            assert overloaded.value.body["error"]["type"] == "overloaded_error"
            for gate in gates:
                gate.set()
            assert [f.result()[0] for f in held] == [200, 200]
        # Places given back: the engine takes requests again.
        assert _chat(url, "single")[0] == 200


def test_keys_waiting_are_served_by_weight():
    import asyncio

    from responsekit.backends.fairness import FairGate

    async def scenario() -> list[str]:
        gate = FairGate("engine", lambda: 1)
        order: list[str] = []
        first = await gate.acquire("a", 3.0, 5, 100)

        async def one(key: str, weight: float) -> None:
            place = await gate.acquire(key, weight, 5, 100)
            order.append(key)
            await asyncio.sleep(0)
            place.release()

        tasks = [asyncio.create_task(one("a", 3.0)) for _ in range(12)] + \
                [asyncio.create_task(one("b", 1.0)) for _ in range(4)]  # fmt: skip
        await asyncio.sleep(0)
        first.release()
        await asyncio.gather(*tasks)
        return order

    order = asyncio.run(scenario())
    assert sorted(order) == ["a"] * 12 + ["b"] * 4
    # Weight 3 against 1: in every stretch of four admissions while both wait, three of a and one of b.
    for start in range(0, 16, 4):
        assert order[start : start + 4].count("b") == 1, order


def test_a_client_that_leaves_while_waiting_or_streaming_gives_its_place_back(upstream, database_url):
    upstream.time_scale = 1.0
    upstream.responder = lambda body: slow_exchange(30, 0.05)
    settings = _settings(upstream, database_url)
    with serve(create_app(settings)) as url:
        # Streams abandoned mid-answer, and requests abandoned while they wait for a place.
        for _ in range(6):
            try:
                httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": "Bearer flood"}, timeout=0.3,
                           json={"model": "test-model", "stream": True, "messages": [{"role": "user", "content": "x"}]})
            except httpx.TimeoutException:
                pass
        upstream.responder = lambda body: text_exchange("ok")
        # Both places come back: two requests at once are served at once.
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: _chat(url, "single"), range(2)))
        assert [status for status, _ in answers] == [200, 200]
        assert max(seconds for _, seconds in answers) < 3


def test_a_key_that_generated_lately_has_a_place_kept_for_it():
    import asyncio

    from responsekit.backends.fairness import FairGate

    async def scenario(keep_seconds: float) -> tuple[int, bool]:
        gate = FairGate("engine", lambda: 4, keep_seconds)
        (await gate.acquire("single", 1.0, 5, 100)).release()  # it generated a moment ago
        flood = [asyncio.create_task(gate.acquire("flood", 1.0, 5, 100)) for _ in range(20)]
        await asyncio.sleep(0)
        flood_held = gate.in_use
        single = asyncio.create_task(gate.acquire("single", 1.0, 5, 100))
        await asyncio.sleep(0)
        started_at_once = single.done()
        for task in [task for task in flood if task.done()]:
            task.result().release()
        (await single).release()
        for task in flood:
            (await task).release()  # a place is given back once: those given back above stay so
        return flood_held, started_at_once

    # The flood runs on three places of four; the other key's next request takes the fourth at once.
    assert asyncio.run(scenario(10.0)) == (3, True)
    # Strictly in turn, the flood takes all four and the other key waits for one to free.
    assert asyncio.run(scenario(0.0)) == (4, False)


def test_a_key_between_requests_starts_at_once_beside_a_flood(upstream, database_url):
    upstream.time_scale = 1.0
    upstream.responder = lambda body: slow_exchange(10, 0.08)  # ~1 s each
    with serve(create_app(_settings(upstream, database_url))) as url:
        assert _chat(url, "single")[0] == 200
        with ThreadPoolExecutor(9) as pool:
            flood = [pool.submit(_chat, url, "flood") for _ in range(8)]
            wait_for(lambda: len(upstream.requests) == 2)  # the first, and one of the flood
            time.sleep(0.3)
            assert len(upstream.requests) == 2  # the flood holds one place of two: the other is kept
            status, seconds = _chat(url, "single")
            assert status == 200
            assert seconds < 1.8, seconds  # its own ~1 s, without waiting for a place
            assert [f.result()[0] for f in flood] == [200] * 8
        assert len(upstream.requests) == 10
