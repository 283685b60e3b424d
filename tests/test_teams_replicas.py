"""Keys, limits and usage on two replicas behind HAProxy on one PostgreSQL: the limits hold across
them, a revoked key is refused by both within a second, and the usage report equals the tokens the
engine reported."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from .harness import start_cli, text_exchange, wait_for
from .test_replicas import HAPROXY, haproxy

ADMIN = "admin-secret"
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="HAProxy is not installed")


def _chat(url: str, key: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=30,
                      json={"model": "test-model", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}]})


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_limits_revocation_and_usage_hold_across_replicas_behind_haproxy(upstream, database_url):
    upstream.responder = lambda body: text_exchange("ok")  # 10 input and 5 output tokens each
    env = {"RESPONSEKIT_ADMIN_API_KEYS": ADMIN}
    replicas = {name: start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url",
                                database_url, env=env) for name in ("a", "b")}  # fmt: skip
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        with haproxy({name: url for name, (_, url) in replicas.items()}) as balancer:
            left = 60 - time.time() % 60
            if left < 25:  # the burst below in one UTC minute (fixed windows: docs/teams.md)
                time.sleep(left + 0.05)
            start = int(time.time()) // 60 * 60
            made = httpx.post(f"{balancer}/admin/v1/api-keys", headers=admin,
                              json={"name": "shared", "limits": {"rpm": 12}}).json()  # fmt: skip
            secret = made["key"]
            for _, url in replicas.values():  # both replicas know the key (one heard of it by notification)
                wait_for(lambda url=url: _chat(url, secret).status_code == 200, timeout=1)
            with ThreadPoolExecutor(30) as pool:
                answers = list(pool.map(lambda _: _chat(balancer, secret), range(30)))
            codes = [answer.status_code for answer in answers]
            assert codes.count(200) == 10 and codes.count(429) == 20, codes
            assert {answer.headers["x-replica"] for answer in answers} == {"a", "b"}
            assert all(a.headers["x-ratelimit-limit-requests"] == "12" for a in answers)
            refused = [a for a in answers if a.status_code == 429]
            assert all(a.headers["x-ratelimit-remaining-requests"] == "0" and int(a.headers["retry-after"]) >= 1
                       for a in refused)  # fmt: skip

            # The usage report (read through the balancer) equals what the engine reported: 12 answers
            # of 10 + 5 tokens; the refused ones are recorded with none.
            def report() -> dict | None:
                page = httpx.get(f"{balancer}/v1/organization/usage/completions", headers=admin,
                                 params={"start_time": start, "bucket_width": "1m", "limit": 3,
                                         "group_by": "api_key_id", "api_key_ids": made["id"]}).json()  # fmt: skip
                results = [r for bucket in page["data"] for r in bucket["results"]]
                total = {key: sum(r[key] for r in results) for key in ("num_model_requests", "input_tokens",
                                                                      "output_tokens")}  # fmt: skip
                return total if total["num_model_requests"] == 32 else None

            assert wait_for(report, timeout=5) == {"num_model_requests": 32, "input_tokens": 120, "output_tokens": 60}

            # Revoked through one replica, refused by both within a second.
            assert httpx.delete(f"{replicas['a'][1]}/admin/v1/api-keys/{made['id']}", headers=admin).status_code == 200
            revoked = time.monotonic()
            for _, url in replicas.values():
                wait_for(lambda url=url: _chat(url, secret).status_code == 401, timeout=1)
            assert time.monotonic() - revoked < 1.0
            assert {_chat(balancer, secret).status_code for _ in range(4)} == {401}
    finally:
        for process, _ in replicas.values():
            process.terminate()
            process.wait(10)
