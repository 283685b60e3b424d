"""Usage: every generation recorded (three protocols, stored or not, streamed or not, failed too),
read by admin keys at `/v1/organization/usage/completions` in OpenAI's Usage API shape (checked by
the `openai` SDK's own admin client and types)."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest
from openai.types.admin.organization.usage_completions_response import UsageCompletionsResponse

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import serve, text_exchange, wait_for

ADMIN = "admin-secret"


def _settings(upstream, database_url: str) -> Settings:
    return Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,
                    database_url=database_url, admin_api_keys=[ADMIN], api_keys=["configured"])  # fmt: skip


def _make_key(url: str, name: str) -> dict:
    return httpx.post(f"{url}/admin/v1/api-keys", headers={"Authorization": f"Bearer {ADMIN}"},
                      json={"name": name}).json()  # fmt: skip


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_every_generation_is_recorded_and_reported_to_admins_only(upstream, database_url):
    upstream.models = ["test-model", "other-model"]
    upstream.responder = lambda body: text_exchange("hello")  # the engine reports 10 in, 5 out
    with serve(create_app(_settings(upstream, database_url))) as url:
        start = int(time.time()) // 60 * 60
        one, two = _make_key(url, "one"), _make_key(url, "two")
        first = openai.OpenAI(base_url=f"{url}/v1", api_key=one["key"], max_retries=0)
        second = openai.OpenAI(base_url=f"{url}/v1", api_key=two["key"], max_retries=0)
        # Key one: Responses stored, not stored, streamed; Chat Completions; a failed generation.
        first.responses.create(model="test-model", input="x")
        first.responses.create(model="test-model", input="x", store=False)
        with first.responses.stream(model="test-model", input="x") as stream:
            stream.get_final_response()
        first.chat.completions.create(model="other-model", messages=[{"role": "user", "content": "x"}])
        upstream.push({"status": 500, "error_body": {"error": {"message": "engine broke"}}})
        with pytest.raises(openai.APIStatusError):
            first.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "x"}])
        # Key two: the Messages API, streamed and not.
        claude = anthropic.Anthropic(base_url=url, api_key=two["key"], max_retries=0)
        claude.messages.create(model="test-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
        with claude.messages.stream(model="test-model", max_tokens=10,
                                    messages=[{"role": "user", "content": "x"}]) as stream:  # fmt: skip
            stream.get_final_message()
        second.responses.create(model="test-model", input="x", background=True)

        admin = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", admin_api_key=ADMIN, max_retries=0)

        def report(**options) -> UsageCompletionsResponse:
            return admin.admin.organization.usage.completions(start_time=start, bucket_width="1m", limit=5, **options)

        def complete() -> UsageCompletionsResponse | None:
            page = report(group_by=["api_key_id", "model"])
            total = sum(r.num_model_requests for bucket in page.data for r in bucket.results)
            return page if total == 8 else None

        page = wait_for(complete, timeout=10)
        assert page.object == "page" and page.data[0].start_time == start and len(page.data) <= 5
        results = [result for bucket in page.data for result in bucket.results]
        by_group: dict[tuple, list[int]] = {}
        for result in results:
            sums = by_group.setdefault((result.api_key_id, result.model), [0, 0, 0])
            sums[0] += result.num_model_requests
            sums[1] += result.input_tokens
            sums[2] += result.output_tokens
        # The tokens the engine reported: 10 in and 5 out per answer; the failed one reported none.
        assert by_group == {
            (one["id"], "test-model"): [4, 30, 15],
            (one["id"], "other-model"): [1, 10, 5],
            (two["id"], "test-model"): [3, 30, 15],
        }, by_group
        # Filters, and the totals without grouping.
        only_two = report(api_key_ids=[two["id"]])
        assert sum(r.num_model_requests for b in only_two.data for r in b.results) == 3
        assert all(r.api_key_id is None for b in only_two.data for r in b.results)
        other = report(models=["other-model"], group_by=["model"])
        assert [r.model for b in other.data for r in b.results] == ["other-model"]

        # Admin keys only: another key never sees anyone's usage, its own included.
        for key, status in ((one["key"], 403), ("configured", 403), ("nope", 401), (None, 401)):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            answer = httpx.get(f"{url}/v1/organization/usage/completions", params={"start_time": start},
                               headers=headers)  # fmt: skip
            assert answer.status_code == status, (key, answer.text)
            assert "input_tokens" not in answer.text
        # Bad parameters are 400s.
        for params in ({}, {"start_time": "x"}, {"start_time": start, "bucket_width": "2h"},
                       {"start_time": start, "group_by": "project_id"}, {"start_time": start, "limit": 100000},
                       {"start_time": start, "end_time": start - 10}, {"start_time": start, "page": "nope"}):  # fmt: skip
            answer = httpx.get(f"{url}/v1/organization/usage/completions", params=params,
                               headers={"Authorization": f"Bearer {ADMIN}"})  # fmt: skip
            assert answer.status_code == 400, (params, answer.text)


def test_pages_of_buckets(upstream, database_url):
    upstream.responder = lambda body: text_exchange("hello")
    with serve(create_app(_settings(upstream, database_url))) as url:
        admin = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", admin_api_key=ADMIN, max_retries=0)
        now = int(time.time())
        start = now // 86400 * 86400 - 3 * 86400
        page = admin.admin.organization.usage.completions(start_time=start, bucket_width="1d", limit=2)
        assert [b.start_time for b in page.data] == [start, start + 86400] and page.has_more
        rest = admin.admin.organization.usage.completions(start_time=start, bucket_width="1d", limit=2,
                                                          page=page.next_page)  # fmt: skip
        assert [b.start_time for b in rest.data] == [start + 2 * 86400, start + 3 * 86400]
        assert not rest.has_more and now < rest.data[-1].end_time <= int(time.time()) + 1


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_the_inspector_shows_a_key_its_own_usage_per_model_with_a_chart(upstream, database_url):
    upstream.models = ["test-model", "other-model"]
    upstream.responder = lambda body: text_exchange("hello")
    with serve(create_app(_settings(upstream, database_url))) as url:
        mine, theirs = _make_key(url, "mine"), _make_key(url, "theirs")
        for key, model in ((mine, "test-model"), (mine, "other-model"), (theirs, "other-model"), (theirs, "other-model")):
            openai.OpenAI(base_url=f"{url}/v1", api_key=key["key"], max_retries=0).chat.completions.create(
                model=model, messages=[{"role": "user", "content": "x"}])
        with httpx.Client(base_url=url) as browser:
            assert browser.get("/ui/usage").status_code == 303  # log in first
            login = browser.post("/ui/login", data={"key": mine["key"], "next": "/ui/usage"})
            assert login.status_code == 303
            # Usage records are written once a second: wait for the four generations' (both models' rows).
            page = wait_for(lambda: (p := browser.get("/ui/usage")).status_code == 200 and "<rect" in p.text
                            and p.text.count('<td class="model">') == 2 and p)  # fmt: skip
            rows = page.text.split("<tbody>")[1]
            # Its own generations, per model: one each; the other key's two are not there.
            assert '<td class="model">other-model</td><td class="num">1</td><td class="num">10</td>' in rows
            assert '<td class="model">test-model</td><td class="num">1</td>' in rows
            assert theirs["id"] not in page.text and "2</td>" not in rows
            assert page.text.count("<rect") == 2
            for width in ("1m", "1d"):
                assert browser.get("/ui/usage", params={"width": width}).status_code == 200
            assert browser.get("/ui/usage", params={"width": "7y"}).status_code == 400


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_batch_of_records_is_written_whole_over_several_statements(database_url):
    import asyncio

    from responsekit.store import Store
    from responsekit.store.usage import ROWS_PER_STATEMENT, UsageRecord, buckets, insert

    async def scenario() -> dict:
        store = await Store.open(database_url)
        try:
            start = int(time.time()) // 60 * 60
            records = [UsageRecord(start * 1000 + n, "hash", "key_a", f"req_{n}", "/v1/chat/completions",
                                   "m1" if n % 2 else "m2", "engine", n, 0, 1, 0, "200", 5)
                       for n in range(ROWS_PER_STATEMENT * 2 + 7)]  # fmt: skip
            await insert(store.database, records)
            return await buckets(store.database, start, start + 60, 60, ["model"], api_key_ids=["key_a"])
        finally:
            await store.close()

    found = asyncio.run(scenario())
    count = ROWS_PER_STATEMENT * 2 + 7
    by_model = {result["model"]: result for result in found[0]}
    assert sum(result["num_model_requests"] for result in found[0]) == count
    assert by_model["m1"]["input_tokens"] == sum(range(1, count, 2))
    assert by_model["m2"]["input_tokens"] == sum(range(0, count, 2))
    assert sum(result["output_tokens"] for result in found[0]) == count
