"""API keys: each key owns what it creates; another key gets 404 for it."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import serve, text_exchange


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_second_key_cannot_see_the_first_keys_objects(upstream, database_url):
    second_hash = hashlib.sha256(b"key-two").hexdigest()
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        api_keys=["key-one", f"sha256:{second_hash}"])  # fmt: skip
    assert settings.listen_host == "0.0.0.0", "with keys, the server may listen beyond loopback"
    one = {"Authorization": "Bearer key-one"}
    two = {"Authorization": "Bearer key-two"}
    with serve(create_app(settings)) as url:
        base = f"{url}/v1"
        assert httpx.get(f"{url}/health").status_code == 200
        for headers, code in [({}, "missing_api_key"), ({"Authorization": "Bearer nope"}, "invalid_api_key")]:
            answer = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "x"}, headers=headers)
            assert answer.status_code == 401 and answer.json()["error"]["code"] == code
            assert httpx.get(f"{base}/models", headers=headers).status_code == 401
        assert httpx.get(f"{base}/models", headers=two).status_code == 200

        upstream.push(text_exchange("secret"))
        response = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "x"}, headers=one).json()
        conversation = httpx.post(f"{base}/conversations", json={}, headers=one).json()
        for path in (f"responses/{response['id']}", f"responses/{response['id']}/input_items",
                     f"conversations/{conversation['id']}", f"conversations/{conversation['id']}/items"):  # fmt: skip
            assert httpx.get(f"{base}/{path}", headers=one).status_code == 200
            assert httpx.get(f"{base}/{path}", headers=two).status_code == 404
        chained = httpx.post(f"{base}/responses", headers=two,
                             json={"model": "test-model", "input": "y", "previous_response_id": response["id"]})  # fmt: skip
        assert chained.status_code == 404
        assert httpx.delete(f"{base}/responses/{response['id']}", headers=two).status_code == 404
        assert httpx.delete(f"{base}/conversations/{conversation['id']}", headers=two).status_code == 404
        assert httpx.get(f"{base}/responses/{response['id']}", headers=one).json()["output_text"] == "secret"


def test_without_keys_the_server_stays_on_loopback():
    assert Settings(probe=False).listen_host == "127.0.0.1"
    assert Settings(probe=False, host="0.0.0.0").listen_host == "0.0.0.0"
