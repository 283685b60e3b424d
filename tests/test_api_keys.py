"""API keys kept as data: the `api-keys` command, the admin API, models a key may use, expiry,
revocation seen by every replica, and what a key made stays its own."""

from __future__ import annotations

import hashlib
import json
import time

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from responsekit.app import create_app
from responsekit.cli.api_keys import expiry
from responsekit.cli.main import app as cli
from responsekit.config import Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import serve, start_cli, text_exchange, wait_for

ADMIN = "admin-secret"
CONFIGURED = "configured-key"


def _settings(upstream, database_url: str, **options) -> Settings:
    return Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,
                    database_url=database_url, admin_api_keys=[ADMIN], api_keys=[CONFIGURED], **options)  # fmt: skip


def _admin(url: str, method: str, path: str = "", key: str | None = ADMIN, **options) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.request(method, f"{url}/admin/v1/api-keys{path}", headers=headers, timeout=10, **options)


def _ask(url: str, key: str, model: str = "test-model") -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=10,
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_the_admin_api_makes_lists_shows_and_revokes_keys(upstream, database_url):
    upstream.responder = lambda body: text_exchange("hello")
    with serve(create_app(_settings(upstream, database_url))) as url:
        # Without a key 401; an unknown key 401; a key that is not an admin key 403.
        assert _admin(url, "GET", key=None).status_code == 401
        assert _admin(url, "GET", key="nope").json()["error"]["code"] == "invalid_api_key"
        refused = _admin(url, "GET", key=CONFIGURED)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"

        made = _admin(url, "POST", json={"name": "ci", "team": "platform", "models": ["test-model"],
                                         "expires_at": int(time.time()) + 3600,
                                         "limits": {"rpm": 60, "tpm": 10000}})  # fmt: skip
        assert made.status_code == 201, made.text
        body = made.json()
        secret = body["key"]
        assert body["name"] == "ci" and body["team"] == "platform" and body["models"] == ["test-model"]
        assert body["limits"] == {"rpm": 60, "tpm": 10000, "max_concurrent": None, "daily_tokens": None,
                                  "monthly_tokens": None}  # fmt: skip
        assert body["last_used_at"] is None and body["revoked_at"] is None
        assert secret not in body["redacted_value"] and body["redacted_value"].endswith(secret[-4:])
        # Only the hash is kept: the secret is in no listing, and in no answer after this one.
        listed = _admin(url, "GET").json()
        assert [key["id"] for key in listed["data"]] == [body["id"]] and "key" not in listed["data"][0]
        shown = _admin(url, "GET", f"/{body['id']}").json()
        assert shown == {k: v for k, v in body.items() if k != "key"}
        assert secret not in str(listed) + str(shown)

        # The key works with the real client, and its use is recorded (at most once a minute).
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0)
        assert client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}]) \
            .choices[0].message.content == "hello"
        assert wait_for(lambda: _admin(url, "GET", f"/{body['id']}").json()["last_used_at"])
        # A configured key keeps working beside the stored ones.
        assert _ask(url, CONFIGURED).status_code == 200

        revoked = _admin(url, "DELETE", f"/{body['id']}")
        assert revoked.status_code == 200 and revoked.json()["deleted"] is True
        refused = _ask(url, secret)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        assert _admin(url, "GET", f"/{body['id']}").json()["revoked_at"] is not None
        assert _admin(url, "DELETE", "/key_missing").status_code == 404
        assert _admin(url, "GET", "/key_missing").status_code == 404
        assert _ask(url, CONFIGURED).status_code == 200


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_the_admin_api_lists_keys_a_page_at_a_time(upstream, database_url):
    with serve(create_app(_settings(upstream, database_url))) as url:
        made = {_admin(url, "POST", json={"name": f"key {n}"}).json()["id"] for n in range(5)}
        # Oldest first (keys made within the same second, in the order of their ids).
        everything = [key["id"] for key in _admin(url, "GET", params={"limit": 100}).json()["data"]]
        assert set(everything) == made and len(everything) == 5
        for order, expected in (("asc", everything), ("desc", everything[::-1])):
            seen, after, pages = [], None, 0
            while True:
                query = {"limit": 2, "order": order, **({"after": after} if after else {})}
                page = _admin(url, "GET", params=query).json()
                assert [key["id"] for key in page["data"]][:1] == ([page["first_id"]] if page["data"] else [])
                seen += [key["id"] for key in page["data"]]
                pages += 1
                if not page["has_more"]:
                    break
                after = page["last_id"]
            assert seen == expected and pages == 3
        # Twenty a page unless asked; an unknown cursor is an empty page; bad values 400.
        assert [key["id"] for key in _admin(url, "GET").json()["data"]] == everything
        assert _admin(url, "GET", params={"after": "key_missing"}).json()["data"] == []
        for query in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"order": "up"}, {"after": "\x00"}):
            answer = _admin(url, "GET", params=query)
            assert answer.status_code == 400 and answer.json()["error"]["param"] == next(iter(query)), query


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_key_uses_only_its_models_and_stops_at_its_expiry(upstream, database_url):
    upstream.models = ["test-model", "other-model"]
    upstream.responder = lambda body: text_exchange("ok")
    with serve(create_app(_settings(upstream, database_url))) as url:
        secret = _admin(url, "POST", json={"name": "narrow", "models": ["test-model"]}).json()["key"]
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=secret, max_retries=0)
        assert [model.id for model in client.models.list()] == ["test-model"]
        client.responses.create(model="test-model", input="x")
        with pytest.raises(openai.NotFoundError) as refused:
            client.responses.create(model="other-model", input="x")
        assert refused.value.code == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="other-model", messages=[{"role": "user", "content": "x"}])
        claude = anthropic.Anthropic(base_url=url, api_key=secret, max_retries=0)
        assert claude.messages.create(model="test-model", max_tokens=10,
                                      messages=[{"role": "user", "content": "x"}]).content[0].text == "ok"  # fmt: skip
        with pytest.raises(anthropic.NotFoundError) as missing:
            claude.messages.create(model="other-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
        assert missing.value.body["error"]["type"] == "not_found_error"
        # Every model for a key that names none.
        wide = _admin(url, "POST", json={"name": "wide"}).json()["key"]
        assert _ask(url, wide, "other-model").status_code == 200

        soon = _admin(url, "POST", json={"name": "short", "expires_at": int(time.time()) + 2}).json()["key"]
        assert _ask(url, soon).status_code == 200
        time.sleep(max(0.0, int(time.time()) + 2 - time.time()) + 1.1)
        expired = _ask(url, soon)
        assert expired.status_code == 401 and expired.json()["error"]["code"] == "expired_api_key"
        past = _admin(url, "POST", json={"name": "late", "expires_at": int(time.time()) - 5})
        assert past.status_code == 400 and past.json()["error"]["param"] == "expires_at"


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_what_a_stored_key_makes_stays_its_own(upstream, database_url):
    upstream.responder = lambda body: text_exchange("private")
    with serve(create_app(_settings(upstream, database_url))) as url:
        one = _admin(url, "POST", json={"name": "one"}).json()["key"]
        two = _admin(url, "POST", json={"name": "two"}).json()["key"]
        first = openai.OpenAI(base_url=f"{url}/v1", api_key=one, max_retries=0)
        second = openai.OpenAI(base_url=f"{url}/v1", api_key=two, max_retries=0)
        response = first.responses.create(model="test-model", input="x")
        conversation = first.conversations.create()
        assert first.responses.retrieve(response.id).output_text == "private"
        with pytest.raises(openai.NotFoundError):
            second.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            second.conversations.retrieve(conversation.id)
        with pytest.raises(openai.NotFoundError):
            second.responses.create(model="test-model", input="y", previous_response_id=response.id)
        # The owner is the key's SHA-256, as for a configured key: the same key configured sees it too.
        owner = hashlib.sha256(one.encode()).hexdigest()
    settings = _settings(upstream, database_url)
    settings.api_keys = [f"sha256:{owner}"]
    with serve(create_app(settings)) as url:
        same = openai.OpenAI(base_url=f"{url}/v1", api_key=one, max_retries=0)
        assert same.responses.retrieve(response.id).output_text == "private"


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_the_command_makes_keys_the_running_server_takes_and_refuses_once_revoked(upstream, database_url):
    upstream.responder = lambda body: text_exchange("ok")
    runner = CliRunner()
    options = ["--database-url", database_url]
    made = runner.invoke(cli, ["api-keys", "create", "--name", "laptop", "--team", "research", "--models",
                               "test-model,other", "--expires", "30d", "--rpm", "10", "--tpm", "5000",
                               "--max-concurrent", "2", "--daily-tokens", "100000", "--monthly-tokens",
                               "1000000", *options])  # fmt: skip
    assert made.exit_code == 0, made.output
    secret = made.output.strip().splitlines()[-1]
    assert secret.startswith("rk-") and " " not in secret
    listed = runner.invoke(cli, ["api-keys", "list", "--json", *options])
    assert listed.exit_code == 0 and secret not in listed.output
    key = json.loads(listed.output.strip().splitlines()[0])
    assert key["name"] == "laptop" and key["team"] == "research" and key["models"] == ["test-model", "other"]
    assert key["limits"] == {"rpm": 10, "tpm": 5000, "max_concurrent": 2, "daily_tokens": 100000,
                             "monthly_tokens": 1000000}  # fmt: skip
    assert abs(key["expires_at"] - (time.time() + 30 * 86400)) < 60
    shown = runner.invoke(cli, ["api-keys", "show", key["id"], *options])
    assert shown.exit_code == 0 and json.loads(shown.output) == key
    assert runner.invoke(cli, ["api-keys", "show", "key_nope", *options]).exit_code == 1
    assert runner.invoke(cli, ["api-keys", "create", "--name", "x", "--expires", "soon", *options]).exit_code == 2

    with serve(create_app(_settings(upstream, database_url))) as url:
        assert _ask(url, secret).status_code == 200
        # Keys stored and none configured: keys are required all the same.
        revoked = runner.invoke(cli, ["api-keys", "revoke", key["id"], *options])
        assert revoked.exit_code == 0 and "revoked" in revoked.output
        # Another process revoked it: PostgreSQL tells the server; SQLite's copy is read again each second.
        wait_for(lambda: _ask(url, secret).status_code == 401, timeout=3)
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,
                        database_url=database_url)  # fmt: skip
    with serve(create_app(settings)) as url:
        keyless = httpx.post(f"{url}/v1/chat/completions", json={"model": "test-model", "messages": []})
        assert keyless.status_code == 401, "stored keys (even all revoked) mean keys are required"


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_a_key_revoked_on_one_replica_is_refused_by_the_other_within_a_second(upstream, database_url):
    upstream.responder = lambda body: text_exchange("ok")
    env = {"RESPONSEKIT_ADMIN_API_KEYS": ADMIN}
    first, url_a = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url", database_url,
                             env=env)  # fmt: skip
    second, url_b = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url", database_url,
                              env=env)  # fmt: skip
    try:
        made = _admin(url_a, "POST", json={"name": "shared"}).json()
        secret = made["key"]
        wait_for(lambda: _ask(url_b, secret).status_code == 200, timeout=1)  # made on A, taken by B
        assert _ask(url_a, secret).status_code == 200
        assert _admin(url_b, "DELETE", f"/{made['id']}").status_code == 200
        revoked = time.monotonic()
        wait_for(lambda: _ask(url_a, secret).status_code == 401, timeout=1)
        assert time.monotonic() - revoked < 1.0
        assert _ask(url_b, secret).status_code == 401
    finally:
        for process in (first, second):
            process.terminate()
            process.wait(10)


_text = st.one_of(st.text(max_size=300), st.integers(), st.none(), st.booleans(), st.lists(st.integers(), max_size=3))
_bodies = st.one_of(
    st.fixed_dictionaries({}, optional={
        "name": _text, "team": _text, "expires_at": st.one_of(st.integers(), _text),
        "models": st.one_of(st.lists(st.text(max_size=20), max_size=3), _text),
        "limits": st.one_of(st.dictionaries(st.sampled_from(["rpm", "tpm", "max_concurrent", "daily_tokens",
                                                             "monthly_tokens", "other"]),
                                            st.one_of(st.integers(), st.text(max_size=5), st.none())), _text),
        "extra": _text,
    }),
    st.lists(st.integers(), max_size=3), st.text(max_size=20), st.integers(),
)  # fmt: skip


def test_the_admin_api_answers_any_body_with_a_4xx_or_a_key(upstream, database_url):
    with serve(create_app(_settings(upstream, database_url))) as url:

        @hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(body=_bodies)
        def check(body):
            answer = _admin(url, "POST", json=body)
            assert answer.status_code in (201, 400), answer.text
            if answer.status_code == 201:
                made = answer.json()
                assert isinstance(body, dict) and made["name"] == body["name"]
                assert _admin(url, "GET", f"/{made['id']}").status_code == 200
            else:
                assert answer.json()["error"]["message"]

        check()
        for path in ("/%00", "/\udcff".encode("utf-8", "surrogatepass").decode("latin-1"), "/" + "x" * 5000):
            assert _admin(url, "GET", path).status_code in (400, 404)
            assert _admin(url, "DELETE", path).status_code in (400, 404)
        assert _admin(url, "POST", content=b"{not json").status_code == 400


def test_expiry_reads_spans_and_dates():
    now = 1_700_000_000.0
    assert expiry("30d", now) == 1_700_000_000 + 30 * 86400
    assert expiry("12h", now) == 1_700_000_000 + 12 * 3600
    assert expiry("2030-01-01", now) == 1893456000
    assert expiry("2030-01-01T01:00:00+01:00", now) == 1893456000
    for bad in ("soon", "2001-01-01", "-3d"):
        with pytest.raises(ValueError):
            expiry(bad, now)
