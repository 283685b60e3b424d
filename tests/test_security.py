"""Security: no request makes the server reach a private address (SSRF), and no key reaches the logs.

Everything here talks to loopback only: the address checks of the policy resolve numeric
addresses and `localhost` (no network), and the servers that could be reached are on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from responsekit.app import create_app
from responsekit.canonical.errors import APIError
from responsekit.config import Settings, UpstreamConfig
from responsekit.tools.outbound import UrlPolicy

from .harness import (
    ScriptedUpstream,
    check_stream,
    output,
    read_sse,
    serve,
    start_cli,
    text_exchange,
)
from .test_mcp import mcp_app

REFUSED = [
    # loopback, however written
    "http://127.0.0.1/", "http://127.1:8080/", "http://2130706433/", "http://0x7f000001/", "http://127.255.0.9/",
    "http://localhost/", "http://LOCALHOST./", "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/",
    "http://user:pass@localhost/", "http://example.com@127.0.0.1/",
    # link-local (cloud metadata) and private networks
    "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://10.0.0.1/", "http://172.16.5.4/",
    "http://192.168.1.1/", "http://[fd00::1]/", "http://100.64.0.1/", "http://224.0.0.1/",
    # not http(s), or no host
    "file:///etc/passwd", "gopher://127.0.0.1:25/", "ftp://example.com/", "http:///path", "not a url",
    "http://127.0.0.1:99999/", "http://example.com:port/", "http://[::1/",
]  # fmt: skip


def _check(policy: UrlPolicy, url: str) -> None:
    asyncio.run(policy.check(url, "tools[0].server_url"))


@pytest.mark.parametrize("url", REFUSED)
def test_the_url_policy_refuses_private_addresses_however_written(url):
    with pytest.raises(APIError) as refused:
        _check(UrlPolicy(), url)
    assert refused.value.status == 400 and refused.value.body()["error"]["code"] == "invalid_url"


def test_the_url_policy_allows_what_the_configuration_names():
    _check(UrlPolicy(), "https://93.184.216.34/mcp")  # a public address (resolved, never contacted)
    _check(UrlPolicy(["127.0.0.1"]), "http://127.0.0.1:9/mcp")
    _check(UrlPolicy(["localhost"]), "http://localhost:9/mcp")
    _check(UrlPolicy(["10.0.0.0/8", "fd00::/8"]), "http://10.1.2.3/mcp")
    _check(UrlPolicy(["10.0.0.0/8", "fd00::/8"]), "http://[fd00::5]/mcp")
    for policy, url in [(UrlPolicy(["127.0.0.1"]), "http://127.0.0.2/"), (UrlPolicy(["10.0.0.0/8"]), "http://192.168.0.1/"),
                        (UrlPolicy(["localhost"]), "http://127.0.0.1/")]:  # fmt: skip
        with pytest.raises(APIError):
            _check(policy, url)


class Witness:
    """A loopback HTTP server that counts what reaches it."""

    def __init__(self) -> None:
        self.hits: list[str] = []

        async def anything(request: Request) -> PlainTextResponse:
            self.hits.append(f"{request.method} {request.url.path}")
            return PlainTextResponse("secret")

        self.app = Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "POST", "DELETE"])])


@pytest.fixture
def witness():
    target = Witness()
    with serve(target.app) as url:
        target.port = int(url.rsplit(":", 1)[1])  # type: ignore[attr-defined]
        yield target


def test_mcp_servers_on_private_addresses_are_never_contacted(server, witness):
    port = witness.port
    for server_url in (f"http://127.0.0.1:{port}/mcp", f"http://localhost:{port}/mcp", f"http://127.1:{port}/mcp",
                       f"http://2130706433:{port}/mcp", f"http://0x7f000001:{port}/sse", "http://127.0.0.1:99999/mcp",
                       "http://[::1/mcp"):  # fmt: skip
        tool = {"type": "mcp", "server_label": "x", "server_url": server_url, "require_approval": "never"}
        for stream in (False, True):
            answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": "x",
                                                                       "tools": [tool], "stream": stream})  # fmt: skip
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_url", server_url
    assert witness.hits == [] and server.upstream.requests == []


def test_allowed_hosts_let_the_server_reach_them(upstream, database_url, witness):
    """The counterpart of the test above: allowed, the same address is contacted (so a refusal means something)."""
    upstream.push(text_exchange("no tools"))
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        allowed_hosts=["127.0.0.1"])  # type: ignore[attr-defined]  # fmt: skip
    with serve(create_app(settings)) as url:
        tool = {"type": "mcp", "server_label": "x", "server_url": f"http://127.0.0.1:{witness.port}/mcp",
                "require_approval": "never"}  # type: ignore[attr-defined]  # fmt: skip
        answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "x", "tools": [tool]})
    assert answer.status_code == 200 and answer.json()["output"][0]["error"]  # not an MCP server: listing failed
    assert witness.hits, "the allowed server was contacted"


def test_image_and_file_urls_to_private_addresses_are_neither_fetched_nor_passed_on(server, witness):
    """An image URL leading to a non-public address is not passed to the engine (which would fetch
    it from inside the network) and a file URL there is not fetched: each is a note in the text
    (docs/attachments.md), and the thread goes on."""
    image = f"http://127.0.0.1:{witness.port}/private.png"  # type: ignore[attr-defined]
    document = f"http://127.0.0.1:{witness.port}/private.pdf"  # type: ignore[attr-defined]
    content = [{"type": "input_text", "text": "Look"}, {"type": "input_image", "image_url": image},
               {"type": "input_file", "file_url": document, "filename": "private.pdf"}]  # fmt: skip
    server.upstream.push(text_exchange("seen"), text_exchange("seen"))
    body = {"model": "test-model", "input": [{"role": "user", "content": content}], "stream": True}
    with httpx.stream("POST", f"{server.base_url}/responses", json=body) as answer:
        assert check_stream(read_sse(answer.iter_lines())[0])["status"] == "completed"
    sent = server.upstream.requests[-1]["messages"][-1]["content"]
    assert image not in sent and "does not let be fetched" in sent
    assert f"[file private.pdf at {document}: it could not be fetched]" in sent
    chat = {"model": "test-model", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Look"}, {"type": "image_url", "image_url": {"url": image}}]}]}  # fmt: skip
    assert httpx.post(f"{server.base_url}/chat/completions", json=chat).status_code == 200
    assert image not in str(server.upstream.requests[-1]["messages"])
    assert witness.hits == []


SECRETS = {
    "client": "sk-client-7f3a9c1e5b",
    "wrong": "sk-wrong-2d8e4f6a0c",
    "upstream": "sk-upstream-9b1d3f5e7a",
    "upstream_header": "hdr-4c6e8a0b2d",
    "mcp": "mcp-token-1a3c5e7f9b",
    "mcp_header": "mcp-hdr-8f0b2d4c6e",
}


def test_keys_and_authorization_headers_never_reach_the_logs(upstream: ScriptedUpstream, tmp_path):
    config = tmp_path / "responsekit.toml"
    config.write_text(
        'probe = false\nlog_level = "debug"\nallowed_hosts = ["127.0.0.1"]\n'
        f'api_keys = ["{SECRETS["client"]}"]\n'
        "[[upstreams]]\n"
        f'name = "scripted"\nbase_url = "{upstream.url}"\napi_key = "{SECRETS["upstream"]}"\n'  # type: ignore[attr-defined]
        f'headers = {{ "X-Api-Key" = "{SECRETS["upstream_header"]}" }}\n'
    )
    upstream.responder = lambda body: text_exchange("fine")
    with serve(mcp_app("streamable-http")) as mcp_url:
        process, url = start_cli("--config", str(config), "--host", "127.0.0.1")
        try:
            _requests_with_keys(f"{url}/v1", upstream, f"{mcp_url}/mcp")
        finally:
            process.terminate()
            process.wait(20)
    assert upstream.headers[0]["authorization"] == f"Bearer {SECRETS['upstream']}", "the upstream key was in play"
    log = output(process)
    assert "DEBUG" in log and "POST /v1/responses" in log, "the server logged at debug level"
    for name, secret in SECRETS.items():
        assert secret not in log, f"the {name} key is in the log"
    assert "Bearer " not in log


def _requests_with_keys(base: str, upstream: ScriptedUpstream, mcp_url: str) -> None:
    good = {"Authorization": f"Bearer {SECRETS['client']}"}
    body = {"model": "test-model", "input": "hi"}
    assert httpx.post(f"{base}/responses", json=body, headers=good).status_code == 200
    with httpx.stream("POST", f"{base}/responses", json={**body, "stream": True}, headers=good) as answer:
        assert read_sse(answer.iter_lines())[1]
    assert httpx.post(f"{base}/responses", json=body,
                      headers={"Authorization": f"Bearer {SECRETS['wrong']}"}).status_code == 401  # fmt: skip
    assert httpx.post(f"{base}/responses", json=body).status_code == 401
    assert httpx.get(f"{base}/models", headers={"Authorization": SECRETS["wrong"]}).status_code == 401
    # The engine fails: its error (which may echo what it was sent) goes to the client, not the log.
    upstream.push({"status": 401, "error_body": json.dumps({"error": {"message": "Invalid API key"}})},
                  {"status": 500, "error_body": "boom"})  # fmt: skip
    for _ in range(2):
        assert httpx.post(f"{base}/responses", json=body, headers=good).status_code >= 400
    # MCP servers with their own authorization and headers: one that works, one that is down.
    for server_url in (mcp_url, "http://127.0.0.1:9/mcp"):
        tool = {"type": "mcp", "server_label": "calc", "server_url": server_url, "require_approval": "never",
                "authorization": SECRETS["mcp"], "headers": {"X-Token": SECRETS["mcp_header"]}}  # fmt: skip
        answer = httpx.post(f"{base}/responses", json={**body, "tools": [tool]}, headers=good, timeout=60)
        assert answer.status_code == 200
        stored = httpx.get(f"{base}/responses/{answer.json()['id']}", headers=good)
        for text in (answer.text, stored.text):  # neither echoed nor stored, as with OpenAI
            assert SECRETS["mcp"] not in text and SECRETS["mcp_header"] not in text
    chat = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(f"{base}/chat/completions", json=chat, headers=good).status_code == 200
    assert httpx.post(f"{base}/chat/completions", json=chat, headers={"Authorization": "Bearer x"}).status_code == 401
