"""The hosted web_search tool: a real search engine API on loopback, real pages, the real fetch path.

`SearchEngine` answers the request shapes of SearXNG, Brave, Tavily and Exa with results that
point at `Site`, a web server with real HTML, a PDF, plain text and redirects. The server may
fetch 127.0.0.1 only because `allowed_hosts` says so; everything else private stays refused.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, WebSearchTool, set_tracing_disabled
from anthropic.types import Message as AnthropicMessage
from openai import AsyncOpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig
from responsekit.tools.outbound import UrlPolicy
from responsekit.tools.web import fetch as web_fetch
from responsekit.tools.web import providers
from responsekit.tools.web.fetch import FetchError, PageFetcher

from .conftest import DATABASES, Server
from .harness import (
    DATA,
    ScriptedUpstream,
    check_chat_chunk,
    check_chat_completion,
    check_response,
    check_stream,
    read_sse,
    serve,
    text_exchange,
    tool_call_exchange,
    wait_for,
)
from .test_claude_code import run_claude
from .test_messages import HEADERS as MESSAGE_HEADERS
from .test_messages import TOOLS as MESSAGE_TOOLS
from .test_messages import client as anthropic_client
from .test_messages import stream as messages_stream
from .test_real_clients import JS, codex_home, run_codex
from .test_stateless import _until_terminal
from .test_vector_stores import pdf_with_text

ETNA_HTML = """<!doctype html><html><head><title>Mount Etna</title><script>var tracking = 1;</script>
<style>body { color: red }</style></head><body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<article><h1>Mount Etna</h1>
<p>Mount Etna, on the east coast of Sicily, is one of the most active volcanoes in the world.</p>
<p>It erupts every few years; its summit craters are almost always degassing, and lava flows reach the
villages on its slopes once or twice a century.</p>
<p>The volcano is a UNESCO World Heritage Site since 2013.</p></article>
<footer>Copyright the volcano society</footer></body></html>"""
PDF_TEXT = "Stromboli has erupted almost continuously for two thousand years"
NOTES = "Field notes.\nKilauea in Hawaii erupted from 1983 to 2018.\nPele's hair is volcanic glass.\n"


class Site:
    """A small web server: an article, a PDF, plain text, redirects (one to a private address),
    a binary file and an oversized page. `hits` lists the paths it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.url = ""

        async def page(request: Request) -> Response:
            path = request.url.path
            self.hits.append(path)
            if path == "/etna.html":
                return Response(ETNA_HTML, media_type="text/html; charset=utf-8")
            if path == "/stromboli.pdf":
                return Response(pdf_with_text(PDF_TEXT), media_type="application/pdf")
            if path == "/notes.txt":
                return PlainTextResponse(NOTES)
            if path == "/moved":
                return RedirectResponse("/etna.html", status_code=302)
            if path == "/to-private":
                return RedirectResponse("http://169.254.169.254/latest/meta-data/", status_code=302)
            if path == "/to-file":
                return RedirectResponse("file:///etc/passwd", status_code=301)
            if path == "/loop":
                return RedirectResponse("/loop", status_code=302)
            if path == "/binary":
                return Response(bytes(range(256)) * 64, media_type="application/octet-stream")
            if path == "/slow":
                await asyncio.sleep(5)
                return PlainTextResponse("too late")
            if path == "/huge.txt":
                return PlainTextResponse("lava " * 400_000)  # 2 MB
            return PlainTextResponse("not found", status_code=404)

        self.app = Starlette(routes=[Route("/{path:path}", page)])


KEYS = {"brave": ("x-subscription-token", "brave-key"), "tavily": ("authorization", "Bearer tavily-key"),
        "exa": ("x-api-key", "exa-key")}  # fmt: skip
"""The header each vendor's key comes in, and the key the test engine accepts."""


class SearchEngine:
    """SearXNG's, Brave's, Tavily's and Exa's search APIs on one port, answering with results on
    `site`. `fail` makes it answer 401, 429 or 500, junk, or too late."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.requests: list[dict[str, Any]] = []
        self.fail: int | str | None = None
        self.app = Starlette(routes=[
            Route("/search", self._search, methods=["GET", "POST"]),
            Route("/res/v1/web/search", self._brave),
            Route("/", lambda request: PlainTextResponse("a search engine")),
        ])  # fmt: skip

    def _results(self) -> list[tuple[str, str, str]]:
        return [
            (f"{self.site.url}/etna.html", "Mount Etna", "Etna in Sicily is one of the most active volcanoes."),
            (f"{self.site.url}/stromboli.pdf", "Stromboli report", "Stromboli erupts almost continuously."),
            ("https://volcanoes.example.org/kilauea", "Kilauea", "Kilauea erupted from 1983 to 2018."),
        ]

    async def _note(self, request: Request, provider: str) -> Response | None:
        body = await request.body()
        self.requests.append({"provider": provider, "method": request.method, "path": request.url.path,
                              "params": dict(request.query_params), "headers": dict(request.headers),
                              "json": json.loads(body) if body else None})  # fmt: skip
        if provider in KEYS:
            header, value = KEYS[provider]
            if request.headers.get(header) != value:
                return JSONResponse({"error": "bad key"}, status_code=401)
        if self.fail == "timeout":
            await asyncio.sleep(5)
        elif self.fail == "junk":
            return Response("<html>Oops, a proxy page</html>", media_type="text/html")
        elif isinstance(self.fail, int):
            return JSONResponse({"error": "failure"}, status_code=self.fail)
        return None

    async def _search(self, request: Request) -> Response:
        provider = "searxng" if request.method == "GET" else (
            "tavily" if "authorization" in request.headers else "exa")  # fmt: skip
        if (failed := await self._note(request, provider)) is not None:
            return failed
        if provider == "searxng":
            assert request.query_params["format"] == "json"
            return JSONResponse({"query": request.query_params["q"], "number_of_results": 3, "results": [
                {"url": url, "title": title, "content": text, "engine": "duckduckgo", "score": 1.0}
                for url, title, text in self._results()]})  # fmt: skip
        if provider == "tavily":
            return JSONResponse({"query": "q", "response_time": 0.5, "results": [
                {"url": url, "title": title, "content": text, "score": 0.9} for url, title, text in self._results()]})
        return JSONResponse({"requestId": "r1", "results": [
            {"id": url, "url": url, "title": title, "text": text, "publishedDate": None} for url, title, text in self._results()]})

    async def _brave(self, request: Request) -> Response:
        if (failed := await self._note(request, "brave")) is not None:
            return failed
        return JSONResponse({"type": "search", "query": {"original": request.query_params["q"]}, "web": {
            "type": "search", "results": [{"url": url, "title": title, "description": text, "type": "search_result"}
                                          for url, title, text in self._results()]}})  # fmt: skip


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    site = Site()
    with serve(site.app) as url:
        site.url = url
        yield site


@pytest.fixture
def engine(site: Site) -> Iterator[SearchEngine]:
    site.hits.clear()
    engine = SearchEngine(site)
    with serve(engine.app) as url:
        engine.url = url  # type: ignore[attr-defined]
        yield engine


@pytest.fixture(autouse=True)
def _short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search engine that does not answer within 1 s, or a page within 3 s, has failed."""
    monkeypatch.setattr(providers, "TIMEOUT", httpx.Timeout(1.0))
    monkeypatch.setattr(web_fetch, "TOTAL_SECONDS", 3.0)


@pytest.fixture
def provider() -> str:
    return "searxng"


@pytest.fixture
def settings(upstream: ScriptedUpstream, engine: SearchEngine, provider: str, tmp_path: Path, database_url: str) -> Settings:
    keys = {"searxng": None, "brave": "brave-key", "tavily": "tavily-key", "exa": "exa-key"}
    return Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)],  # type: ignore[attr-defined]
                    probe=False, data_dir=tmp_path, database_url=database_url,
                    allowed_hosts=["127.0.0.1"], web_search_provider=provider,  # type: ignore[arg-type]
                    web_search_url=engine.url, web_search_api_key=keys[provider])  # type: ignore[attr-defined]  # fmt: skip


def searching(*calls: tuple[str, dict[str, Any]], answer: str = "Etna erupts every few years [1].") -> Any:
    """An engine that makes `calls` one generation each, in order, then answers with `answer`."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        done = sum(1 for message in body["messages"] if message["role"] == "tool")
        if done < len(calls):
            name, arguments = calls[done]
            return tool_call_exchange(name, arguments, call_id=f"call_{done}")
        return text_exchange(answer)

    return respond


def stream(server: Server, body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with httpx.stream("POST", f"{server.base_url}/responses", json={"stream": True, **body}, timeout=60) as answer:
        assert answer.status_code == 200, answer.read()
        events, done = read_sse(answer.iter_lines())
    assert done
    return events, check_stream(events)


def tool_outputs(upstream: ScriptedUpstream) -> list[str]:
    """What the model read back from each tool, in order."""
    return [m["content"] for m in upstream.requests[-1]["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("provider", ["searxng", "brave", "tavily", "exa"])
def test_search_then_answer_with_a_url_citation(server, engine, provider):
    server.upstream.responder = searching(("web_search", {"query": "most active volcano"}))
    events, response = stream(server, {
        "model": "test-model", "input": "Which volcano is very active?", "include": ["web_search_call.action.sources"],
        "tools": [{"type": "web_search", "user_location": {"type": "approximate", "country": "IT", "city": "Catania"}}],
    })  # fmt: skip
    assert response["status"] == "completed"
    search = next(item for item in response["output"] if item["type"] == "web_search_call")
    assert search["status"] == "completed" and search["id"].startswith("ws_")
    sources = [{"type": "url", "url": url} for url, _, _ in engine._results()]
    assert search["action"] == {"type": "search", "query": "most active volcano", "queries": ["most active volcano"],
                                "sources": sources}  # fmt: skip
    where = [e["type"] for e in events if e.get("item_id") == search["id"]]
    assert where == ["response.web_search_call.in_progress", "response.web_search_call.searching",
                     "response.web_search_call.completed"]  # fmt: skip
    kinds = [e["type"] for e in events]
    assert kinds.index("response.web_search_call.completed") < kinds.index("response.output_text.delta")
    message = response["output"][-1]
    text = message["content"][0]["text"]
    (citation,) = message["content"][0]["annotations"]
    assert citation == {"type": "url_citation", "url": sources[0]["url"], "title": "Mount Etna",
                        "start_index": text.index("[1]"), "end_index": text.index("[1]") + 3}  # fmt: skip
    assert any(e["type"] == "response.output_text.annotation.added" and e["annotation"] == citation for e in events)

    offered = [tool["function"]["name"] for tool in server.upstream.requests[0]["tools"]]
    assert offered == ["web_search", "web_open_page", "web_find_in_page"]
    (output,) = tool_outputs(server.upstream)
    assert output.startswith(f"[1] Mount Etna\nURL: {sources[0]['url']}\nEtna in Sicily")
    assert "[3] Kilauea" in output and "Cite each result" in output

    (sent,) = engine.requests
    assert sent["provider"] == provider
    if provider == "searxng":
        assert (sent["method"], sent["path"], sent["params"]["q"]) == ("GET", "/search", "most active volcano")
    elif provider == "brave":
        assert (sent["method"], sent["path"], sent["params"]["q"]) == ("GET", "/res/v1/web/search", "most active volcano")
        assert sent["params"]["country"] == "IT" and sent["headers"]["x-loc-city"] == "Catania"
    elif provider == "tavily":
        assert (sent["method"], sent["path"], sent["json"]["query"]) == ("POST", "/search", "most active volcano")
        assert sent["json"]["max_results"] == 5
    else:
        assert (sent["method"], sent["path"], sent["json"]["query"]) == ("POST", "/search", "most active volcano")
        assert sent["json"]["numResults"] == 5 and sent["json"]["userLocation"] == "IT"


def test_open_find_and_read_html_pdf_and_text(server, site):
    server.upstream.responder = searching(
        ("web_search", {"query": "volcanoes"}),
        ("web_open_page", {"url": f"{site.url}/etna.html"}),
        ("web_find_in_page", {"url": f"{site.url}/stromboli.pdf", "pattern": "two THOUSAND"}),
        ("web_open_page", {"url": f"{site.url}/notes.txt"}),
        ("web_find_in_page", {"url": f"{site.url}/etna.html", "pattern": "Unesco"}),
        answer="Etna [1], Stromboli [2] and Kilauea [4].",
    )  # fmt: skip
    _, response = stream(server, {"model": "test-model", "input": "Volcanoes?", "tools": [{"type": "web_search"}]})
    calls = [item for item in response["output"] if item["type"] == "web_search_call"]
    assert [call["action"] for call in calls] == [
        {"type": "search", "query": "volcanoes", "queries": ["volcanoes"]},
        {"type": "open_page", "url": f"{site.url}/etna.html"},
        {"type": "find_in_page", "url": f"{site.url}/stromboli.pdf", "pattern": "two THOUSAND"},
        {"type": "open_page", "url": f"{site.url}/notes.txt"},
        {"type": "find_in_page", "url": f"{site.url}/etna.html", "pattern": "Unesco"},
    ]  # fmt: skip
    assert all(call["status"] == "completed" for call in calls)
    search, html, pdf, text, find = tool_outputs(server.upstream)
    assert search.startswith("[1] Mount Etna") and "[2] Stromboli report" in search
    assert "sources" not in calls[0]["action"], "sources only when included"
    assert html.startswith(f"[1] Mount Etna\nURL: {site.url}/etna.html\n\n")
    assert "one of the most active volcanoes" in html and "tracking" not in html and "color: red" not in html
    assert pdf.startswith("[2] ") and "1 match(es) of 'two THOUSAND'" in pdf and "two thousand years" in pdf
    assert text.startswith(f"[4] {site.url}/notes.txt") and "Kilauea in Hawaii erupted from 1983" in text
    assert "UNESCO World Heritage" in find
    assert site.hits.count("/etna.html") == 1, "a page is read once per response"
    annotations = response["output"][-1]["content"][0]["annotations"]
    assert [a["url"] for a in annotations] == [f"{site.url}/etna.html", f"{site.url}/stromboli.pdf", f"{site.url}/notes.txt"]
    assert annotations[1]["title"] == "Stromboli report"


def test_redirects_are_followed_and_checked_at_every_hop(server, site):
    server.upstream.responder = searching(
        ("web_open_page", {"url": f"{site.url}/moved"}),
        ("web_open_page", {"url": f"{site.url}/to-private"}),
        ("web_open_page", {"url": "http://10.1.2.3/admin"}),
        ("web_open_page", {"url": f"{site.url}/binary"}),
        answer="Done.",
    )  # fmt: skip
    response = httpx.post(f"{server.base_url}/responses", timeout=60, json={
        "model": "test-model", "input": "Read these.", "tools": [{"type": "web_search"}]}).json()  # fmt: skip
    check_response(response)
    assert response["status"] == "completed"
    moved, private, direct, binary = tool_outputs(server.upstream)
    assert "Mount Etna" in moved and f"URL: {site.url}/etna.html" in moved
    assert private.startswith("Error: The page could not be read:") and "169.254.169.254" in private
    assert direct.startswith("Error: The page could not be read:") and "non-public address" in direct
    assert binary.startswith("Error: ") and "application/octet-stream" in binary
    statuses = [item["status"] for item in response["output"] if item["type"] == "web_search_call"]
    assert statuses == ["completed", "failed", "failed", "failed"]
    assert "/to-private" in site.hits and "/binary" in site.hits


REFUSED = [
    "http://10.0.0.1/", "http://192.168.1.10/router", "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
    "http://[fe80::1]/", "http://0.0.0.0/", "http://224.0.0.251/", "http://[::ffff:10.0.0.1]/", "file:///etc/passwd",
    "ftp://example.com/file", "gopher://127.0.0.1:70/", "javascript:alert(1)", "data:text/html,<b>hi</b>",
    "http:///no-host", "http://127.0.0.1:99999/", "http://[not-an-address]/", "//127.0.0.1/", "etna.html", "",
]  # fmt: skip


@pytest.mark.parametrize("url", REFUSED)
def test_fetch_refuses_private_addresses_and_odd_urls(site, url):
    fetcher = PageFetcher(UrlPolicy(["127.0.0.1"]))
    with pytest.raises(FetchError) as refused:
        asyncio.run(fetcher.fetch(url))
    assert refused.value.outcome in ("refused", "unreachable"), refused.value.message


@pytest.mark.parametrize(("path", "outcome"), [("/to-private", "refused"), ("/to-file", "refused"),
                                               ("/loop", "refused"), ("/binary", "unsupported"),
                                               ("/huge.txt", "too_large"), ("/missing", "http_error"),
                                               ("/slow", "timeout")])  # fmt: skip
def test_fetch_refusals(site, path, outcome):
    fetcher = PageFetcher(UrlPolicy(["127.0.0.1"]), max_bytes=1_000_000)
    with pytest.raises(FetchError) as refused:
        asyncio.run(fetcher.fetch(site.url + path))
    assert refused.value.outcome == outcome, refused.value.message


def test_without_allowed_hosts_loopback_pages_are_refused(site):
    with pytest.raises(FetchError) as refused:
        asyncio.run(PageFetcher(UrlPolicy()).fetch(f"{site.url}/etna.html"))
    assert refused.value.outcome == "refused" and "127.0.0.1" in refused.value.message


def test_external_web_access_false_searches_and_fetches_nothing(server, engine, site):
    server.upstream.responder = searching(("web_search", {"query": "etna"}))
    response = httpx.post(f"{server.base_url}/responses", timeout=60, json={
        "model": "test-model", "input": "Etna?", "include": ["web_search_call.action.sources"],
        "tools": [{"type": "web_search", "external_web_access": False, "search_context_size": "low"}]}).json()  # fmt: skip
    check_response(response)
    assert [tool["function"]["name"] for tool in server.upstream.requests[0]["tools"]] == ["web_search"]
    (output,) = tool_outputs(server.upstream)
    assert output.count("URL: ") == 2, "low context: half of the five results the server allows, at most"
    assert len(response["output"][0]["action"]["sources"]) == 2
    assert site.hits == [] and len(engine.requests) == 1


def test_allowed_domains_filter_results_and_pages(server, engine, site):
    server.upstream.responder = searching(("web_search", {"query": "kilauea"}),
                                          ("web_open_page", {"url": f"{site.url}/etna.html"}), answer="Kilauea [1].")  # fmt: skip
    response = httpx.post(f"{server.base_url}/responses", timeout=60, json={
        "model": "test-model", "input": "Kilauea?", "tools": [{"type": "web_search", "filters": {"allowed_domains": ["example.org"]}}],
    }).json()  # fmt: skip
    check_response(response)
    search, page = tool_outputs(server.upstream)
    assert search.startswith("[1] Kilauea\nURL: https://volcanoes.example.org/kilauea") and "Etna" not in search
    assert page.startswith("Error: ") and "outside the domains" in page and site.hits == []
    assert "(site:example.org)" in engine.requests[0]["params"]["q"]
    assert response["output"][-1]["content"][0]["annotations"][0]["url"] == "https://volcanoes.example.org/kilauea"


@pytest.mark.parametrize(("fail", "outcome", "says"), [
    (401, "unauthorized", "refused the server's key"), (429, "rate_limited", "rate limiting"),
    (500, "server_error", "failed (500)"), (503, "server_error", "failed (503)"),
    (403, "unauthorized", "must enable the JSON format"),
    ("junk", "bad_answer", "could not be read"), ("timeout", "timeout", "did not answer in time"),
])  # fmt: skip
def test_provider_failures_are_errors_the_model_reads(server, engine, fail, outcome, says):
    engine.fail = fail
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="The search failed, sorry.")
    _, response = stream(server, {"model": "test-model", "input": "Etna?", "tools": [{"type": "web_search"}]})
    assert response["status"] == "completed" and response["output_text"] == "The search failed, sorry."
    search = response["output"][0]
    assert search["type"] == "web_search_call" and search["status"] == "failed"
    assert search["action"] == {"type": "search", "query": "etna", "queries": ["etna"]}
    (output,) = tool_outputs(server.upstream)
    assert output.startswith("Error: The web search failed: The search engine (searxng)") and says in output
    metrics = httpx.get(f"{server.url}/metrics").text
    assert f'responsekit_web_operations_total{{operation="search",outcome="{outcome}",provider="searxng"}} 1.0' in metrics


def test_a_wrong_key_is_a_readable_error(server, engine, settings):
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="No luck.")
    settings.web_search_provider, settings.web_search_api_key = "brave", "wrong"
    with serve(create_app(settings)) as url:
        response = httpx.post(f"{url}/v1/responses", timeout=60, json={
            "model": "test-model", "input": "Etna?", "tools": [{"type": "web_search_preview"}]}).json()  # fmt: skip
    check_response(response)
    assert response["output"][0]["status"] == "failed"
    assert "refused the server's key (401)" in tool_outputs(server.upstream)[0]


@pytest.mark.parametrize("forced", ["web_search_preview", "web_search"])
def test_tool_choice_forces_a_search_and_max_tool_calls_bounds_the_loop(server, engine, forced):
    server.upstream.responder = lambda body: (
        tool_call_exchange("web_search", {"query": f"try {len(body['messages'])}"}, call_id=f"c{len(body['messages'])}")
        if body.get("tools") and body.get("tool_choice") != "none" else text_exchange("Enough searching.")
    )  # fmt: skip
    response = httpx.post(f"{server.base_url}/responses", timeout=60, json={
        "model": "test-model", "input": "Search.", "tool_choice": {"type": forced}, "max_tool_calls": 2,
        "tools": [{"type": "web_search_2025_08_26"}]}).json()  # fmt: skip
    if forced == "web_search_preview":  # the spec's ToolChoiceTypes; `web_search` is accepted too, and echoed as sent
        check_response(response)
    first = server.upstream.requests[0]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    assert [item["type"] for item in response["output"]] == ["web_search_call", "web_search_call", "message"]
    assert response["status"] == "completed" and response["tool_choice"] == {"type": forced}
    assert len(engine.requests) == 2


def test_a_client_function_named_like_the_web_functions_keeps_its_name(server, engine):
    server.upstream.responder = searching(("web__web_search", {"query": "etna"}), answer="Done.")
    tools = [{"type": "function", "name": "web_search", "parameters": {"type": "object"}}, {"type": "web_search"}]
    response = httpx.post(f"{server.base_url}/responses", timeout=60,
                          json={"model": "test-model", "input": "Etna?", "tools": tools}).json()  # fmt: skip
    check_response(response)
    names = [tool["function"]["name"] for tool in server.upstream.requests[0]["tools"]]
    assert names == ["web_search", "web__web_search", "web_open_page", "web_find_in_page"]
    assert response["output"][0]["type"] == "web_search_call" and len(engine.requests) == 1


def test_replayed_web_search_calls_reach_the_model(server):
    server.upstream.responder = lambda body: text_exchange("Noted.")
    history = [
        {"role": "user", "content": "Is Etna active?"},
        {"type": "web_search_call", "id": "ws_68a0c1d2e3f4", "status": "completed",
         "action": {"type": "search", "query": "etna activity", "sources": [{"type": "url", "url": "https://a.example/etna"}]}},
        {"type": "web_search_call", "id": "ws_2", "status": "completed", "action": {"type": "open_page", "url": "https://a.example/etna"}},
        {"type": "web_search_call", "id": "ws_3", "status": "completed",
         "action": {"type": "find_in_page", "url": "https://a.example/etna", "pattern": "2024"}},
        {"type": "web_search_call", "id": "ws_4", "status": "completed", "action": {"type": "search"}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Yes [1].",
         "annotations": [{"type": "url_citation", "url": "https://a.example/etna", "title": "Etna", "start_index": 4, "end_index": 7}]}]},
        {"role": "user", "content": "Thanks"},
    ]  # fmt: skip
    for tools in ([], [{"type": "web_search"}]):
        answer = httpx.post(f"{server.base_url}/responses", timeout=60,
                            json={"model": "test-model", "input": history, "store": False, "tools": tools})  # fmt: skip
        assert answer.status_code == 200, answer.text
        check_response(answer.json())
        messages = server.upstream.requests[-1]["messages"]
        calls = [call["function"] for m in messages for call in m.get("tool_calls") or ()]
        assert calls == [{"name": "web_search", "arguments": '{"query": "etna activity"}'},
                         {"name": "web_open_page", "arguments": '{"url": "https://a.example/etna"}'},
                         {"name": "web_find_in_page", "arguments": '{"url": "https://a.example/etna", "pattern": "2024"}'},
                         {"name": "web_search", "arguments": '{"query": ""}'}]  # fmt: skip
        results = [m["content"] for m in messages if m["role"] == "tool"]
        assert results[0] == "Sources found:\n- https://a.example/etna"
        assert results[1] == "The page https://a.example/etna was read; its text was not kept."
        assert messages[-1] == {"role": "user", "content": "Thanks"}


STORED_CHAINS = ["previous_response_id", "conversation", "background", "websocket"]
"""How a second turn builds on a first the server kept: its stored response, its conversation, its
background run's stored end, or a WebSocket's cache (`store: false`)."""


def turn(server: Server, chain: str, body: dict[str, Any], first: dict[str, Any] | None, socket: Any) -> dict[str, Any]:
    """One turn through `chain`, continuing `first` (None: the first turn); its Response."""
    if chain == "websocket":
        socket.send({"type": "response.create", **body, "store": False,
                     **({"previous_response_id": first["id"]} if first else {})})  # fmt: skip
        return check_stream(list(_until_terminal(socket)))
    if chain == "conversation":
        body["conversation"] = first["conversation"]["id"] if first else httpx.post(f"{server.base_url}/conversations",
                                                                                    json={}).json()["id"]  # fmt: skip
    elif first:
        body["previous_response_id"] = first["id"]
    if chain == "background" and not first:
        started = httpx.post(f"{server.base_url}/responses", timeout=60, json={**body, "background": True}).json()
        wait_for(lambda: httpx.get(f"{server.base_url}/responses/{started['id']}").json()["status"] == "completed",
                 timeout=30)  # fmt: skip
        return httpx.get(f"{server.base_url}/responses/{started['id']}").json()
    answer = httpx.post(f"{server.base_url}/responses", timeout=60, json=body)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("chain", STORED_CHAINS)
def test_a_stored_search_is_remembered_by_the_next_turn(server, site, chain):
    """The next turn's model reads each call as the first turn's did: the results' titles, URLs and
    text, the page, the matches, the error; the items a client reads back stay the spec's."""
    page = f"{site.url}/etna.html"
    server.upstream.responder = searching(("web_search", {"query": "etna"}), ("web_open_page", {"url": page}),
                                          ("web_find_in_page", {"url": page, "pattern": "UNESCO"}),
                                          ("web_open_page", {"url": f"{site.url}/binary"}))  # fmt: skip
    tools = [{"type": "web_search"}]
    with server.client().responses.connect() if chain == "websocket" else nullcontext() as socket:
        first = turn(server, chain, {"model": "test-model", "input": "Etna?", "tools": tools}, None, socket)
        read_then = tool_outputs(server.upstream)
        server.upstream.responder = lambda body: text_exchange("Anything else?")
        second = turn(server, chain, {"model": "test-model", "input": "Thanks", "tools": tools}, first, socket)
    assert second["output_text"] == "Anything else?"
    messages = server.upstream.requests[-1]["messages"]
    calls = [call["function"] for m in messages for call in m.get("tool_calls") or ()]
    assert calls == [{"name": "web_search", "arguments": '{"query": "etna"}'},
                     {"name": "web_open_page", "arguments": json.dumps({"url": page})},
                     {"name": "web_find_in_page", "arguments": json.dumps({"url": page, "pattern": "UNESCO"})},
                     {"name": "web_open_page", "arguments": json.dumps({"url": f"{site.url}/binary"})}]  # fmt: skip
    assert [m["content"] for m in messages if m["role"] == "tool"] == read_then
    search, opened, found, refused = read_then
    assert search.startswith(f"[1] Mount Etna\nURL: {page}\nEtna in Sicily is one of the most active volcanoes.")
    assert "[3] Kilauea\nURL: https://volcanoes.example.org/kilauea\nKilauea erupted from 1983 to 2018." in search
    assert "It erupts every few years" in opened and "UNESCO World Heritage Site since 2013" in found
    assert refused.startswith("Error: The page could not be read:") and "application/octet-stream" in refused
    if chain == "websocket":
        return
    searches = [item for item in first["output"] if item["type"] == "web_search_call"]
    assert [set(item) for item in searches] == [{"id", "type", "status", "action"}] * 4, "what was read is kept aside"
    listed = (httpx.get(f"{server.base_url}/conversations/{first['conversation']['id']}/items?order=asc").json()["data"]
              if chain == "conversation" else
              httpx.get(f"{server.base_url}/responses/{second['id']}/input_items?order=asc").json()["data"])  # fmt: skip
    assert [item for item in listed if item["type"] == "web_search_call"] == searches
    inspected = httpx.get(f"{server.url}/ui/responses/{first['id']}").text  # the inspector shows the search
    assert "web search" in inspected and ">etna<" in inspected and "/etna.html" in inspected


def test_codex_request_searches(server, engine):
    body = {**json.loads((DATA / "codex_request.json").read_text())["first_request"]["body"], "model": "test-model"}
    assert {"type": "web_search", "external_web_access": True} in body["tools"]
    server.upstream.responder = searching(("web_search", {"query": "codex cli"}), answer="Found it [1].")
    _, response = stream(server, body)
    assert [item["type"] for item in response["output"]] == ["web_search_call", "message"]
    assert response["status"] == "completed" and len(engine.requests) == 1
    names = [tool["function"]["name"] for tool in server.upstream.requests[0]["tools"]]
    assert {"exec_command", "web_search", "web_open_page", "web_find_in_page"} <= set(names)
    assert response["output"][-1]["content"][0]["annotations"][0]["type"] == "url_citation"


def test_an_engine_that_cannot_be_reached_does_not_stop_the_server(upstream, tmp_path, unused_port):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path, web_search_provider="searxng", web_search_url=f"http://127.0.0.1:{unused_port}")  # fmt: skip
    upstream.responder = searching(("web_search", {"query": "etna"}), answer="No search today.")
    with serve(create_app(settings)) as url:
        health = httpx.get(f"{url}/health").json()["web_search"]
        assert health["provider"] == "searxng" and health["reachable"] is False and health["problem"]
        response = httpx.post(f"{url}/v1/responses", timeout=60, json={
            "model": "test-model", "input": "Etna?", "tools": [{"type": "web_search"}]}).json()  # fmt: skip
    check_response(response)
    assert response["status"] == "completed" and response["output"][0]["status"] == "failed"
    assert "could not be reached" in tool_outputs(upstream)[0]


def test_without_a_provider_web_search_is_dropped_and_health_says_why(upstream, tmp_path, caplog):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path)  # fmt: skip
    upstream.push(text_exchange("No search."))
    with serve(create_app(settings)) as url:
        health = httpx.get(f"{url}/health").json()["web_search"]
        assert health == {"provider": None, "problem": "no web_search_provider is configured: web_search tools are dropped"}
        response = httpx.post(f"{url}/v1/responses", timeout=60, json={
            "model": "test-model", "input": "Etna?", "tools": [{"type": "web_search"}]}).json()  # fmt: skip
        forced = httpx.post(f"{url}/v1/responses", timeout=60, json={
            "model": "test-model", "input": "Etna?", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}})  # fmt: skip
    check_response(response)
    assert "tools" not in upstream.requests[-1] and response["tools"] == [{"type": "web_search"}]
    assert forced.status_code == 400 and forced.json()["error"]["param"] == "tool_choice"
    assert any("no web_search_provider is configured" in r.getMessage() for r in caplog.records)


def test_searxng_without_its_url_is_a_setting_error(upstream, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path, web_search_provider="searxng")  # fmt: skip
    with serve(create_app(settings)) as url:
        health = httpx.get(f"{url}/health").json()["web_search"]
    assert health["provider"] is None and "needs web_search_url" in health["problem"]


# --- Chat Completions: web_search_options ------------------------------------------------


def test_chat_completions_search_and_annotate(server, engine):
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Etna erupts every few years [1].")
    answer = httpx.post(f"{server.base_url}/chat/completions", timeout=60, json={
        "model": "test-model", "messages": [{"role": "user", "content": "Is Etna active?"}],
        "web_search_options": {"search_context_size": "high",
                               "user_location": {"type": "approximate", "approximate": {"country": "IT"}}}})  # fmt: skip
    assert answer.status_code == 200, answer.text
    completion = check_chat_completion(answer.json())
    message = completion.choices[0].message
    assert message.content == "Etna erupts every few years [1]." and message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"
    (annotation,) = message.annotations or []
    assert annotation.type == "url_citation" and annotation.url_citation.url.endswith("/etna.html")
    assert (annotation.url_citation.start_index, annotation.url_citation.end_index) == (28, 31)
    assert annotation.url_citation.title == "Mount Etna"
    assert completion.usage is not None and completion.usage.prompt_tokens == 60, "both generations counted"
    (sent,) = engine.requests
    assert sent["params"]["q"] == "etna"
    assert [t["function"]["name"] for t in server.upstream.requests[0]["tools"]] == [
        "web_search", "web_open_page", "web_find_in_page"]  # fmt: skip


def test_chat_completions_stream_hides_the_search_and_keeps_client_calls(server, engine):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    server.upstream.responder = lambda body: (
        tool_call_exchange("web_search", {"query": "etna"}, call_id="s1")
        if not any(m["role"] == "tool" for m in body["messages"])
        else tool_call_exchange("get_weather", {"city": "Catania"}, call_id="w1")
    )  # fmt: skip
    chunks = []
    with httpx.stream("POST", f"{server.base_url}/chat/completions", timeout=60, json={
        "model": "test-model", "messages": [{"role": "user", "content": "Etna and weather?"}], "tools": tools,
        "stream": True, "web_search_options": {}}) as answer:  # fmt: skip
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    for chunk in chunks:
        check_chat_chunk(chunk)
    calls = [call for chunk in chunks for choice in chunk["choices"] for call in choice["delta"].get("tool_calls") or ()]
    assert [call["function"]["name"] for call in calls if "name" in call.get("function", {})] == ["get_weather"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert len(engine.requests) == 1


def test_chat_completions_without_a_provider_ignore_web_search_options(upstream, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path)  # fmt: skip
    upstream.push(text_exchange("From memory."))
    with serve(create_app(settings)) as url:
        answer = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": "test-model", "messages": [{"role": "user", "content": "Etna?"}], "web_search_options": {}})  # fmt: skip
        bad = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": "test-model", "messages": [{"role": "user", "content": "Etna?"}],
            "web_search_options": {"user_location": "Sicily"}})  # fmt: skip
    assert check_chat_completion(answer.json()).choices[0].message.content == "From memory."
    assert "tools" not in upstream.requests[-1]
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "web_search_options.user_location"


@pytest.mark.parametrize(("tool", "param"), [
    ({"type": "web_search", "filters": ["example.com"]}, "tools[0].filters"),
    ({"type": "web_search", "filters": {"allowed_domains": "example.com"}}, "tools[0].filters.allowed_domains"),
    ({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size"),
    ({"type": "web_search_preview", "user_location": "Sicily"}, "tools[0].user_location"),
    ({"type": "web_search", "external_web_access": "yes"}, "tools[0].external_web_access"),
])  # fmt: skip
def test_malformed_web_search_tools_are_400s(server, tool, param):
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": "x", "tools": [tool]})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


# --- Messages API: the web_search server tool ---------------------------------------------


ANTHROPIC_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def test_messages_search_blocks_and_citations(server, engine):
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Etna erupts every few years [1].")
    request = {"model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": "Is Etna active?"}],
               "tools": [*MESSAGE_TOOLS, ANTHROPIC_TOOL]}  # fmt: skip
    events = messages_stream(server.url, request)
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    use, result, text = starts[-3:]
    assert use["type"] == "server_tool_use" and use["name"] == "web_search" and use["id"].startswith("srvtoolu_")
    arguments = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
                        and e["delta"]["type"] == "input_json_delta")  # fmt: skip
    assert json.loads(arguments) == {"query": "etna"}
    assert result["type"] == "web_search_tool_result" and result["tool_use_id"] == use["id"]
    assert [r["url"] for r in result["content"]] == [url for url, _, _ in engine._results()]
    assert all(r["encrypted_content"] and "Etna" not in r["encrypted_content"] for r in result["content"])
    assert text["type"] == "text"
    (citation,) = [e["delta"]["citation"] for e in events if e["type"] == "content_block_delta"
                   and e["delta"]["type"] == "citations_delta"]  # fmt: skip
    assert citation["type"] == "web_search_result_location" and citation["url"].endswith("/etna.html")
    assert citation["title"] == "Mount Etna" and citation["cited_text"].startswith("Etna in Sicily")
    assert events[-2]["usage"]["server_tool_use"] == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    offered = [tool["function"]["name"] for tool in server.upstream.requests[0]["tools"]]
    assert offered == ["get_weather", "web_search"], "Anthropic's search reads no page: search only"

    # The turn replayed: the model reads the call and the results' text again (sealed by this server).
    server.upstream.responder = lambda body: text_exchange("You are welcome.")
    content = [use | {"input": {"query": "etna"}}, result, {"type": "text", "text": "Etna erupts every few years [1].",
                                                            "citations": [citation]}]  # fmt: skip
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={**request, "messages": [
        *request["messages"], {"role": "assistant", "content": content}, {"role": "user", "content": "Thanks"}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    AnthropicMessage.model_validate(answer.json(), strict=True)
    messages = server.upstream.requests[-1]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == use["id"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "web_search", "arguments": '{"query": "etna"}'}
    assert messages[2]["role"] == "tool" and messages[2]["content"].startswith("[1] Mount Etna\nURL: ")
    assert "Etna in Sicily is one of the most active volcanoes." in messages[2]["content"]
    assert messages[3] == {"role": "assistant", "content": "Etna erupts every few years [1]."}


def test_messages_search_failure_and_non_streaming(server, engine):
    engine.fail = 429
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="No search now.")
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": "Etna?"}],
        "tools": [ANTHROPIC_TOOL | {"blocked_domains": ["example.org"]}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    message = AnthropicMessage.model_validate(answer.json(), strict=True)
    kinds = [block.type for block in message.content]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"]
    assert answer.json()["content"][1]["content"] == {"type": "web_search_tool_result_error", "error_code": "too_many_requests"}
    assert "rate limiting" in tool_outputs(server.upstream)[0]


def test_messages_without_a_provider_leave_the_server_tool_out(upstream, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path)  # fmt: skip
    upstream.push(text_exchange("From memory."))
    with serve(create_app(settings)) as url:
        answer = httpx.post(f"{url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
            "model": "test-model", "max_tokens": 100, "messages": [{"role": "user", "content": "Etna?"}],
            "tools": [ANTHROPIC_TOOL]})  # fmt: skip
    assert answer.status_code == 200 and answer.json()["content"][0]["text"] == "From memory."
    assert "tools" not in upstream.requests[-1]


def test_codex_cli_searches_the_web(server, engine, tmp_path):
    """Codex CLI sends its web_search tool; the model searches and Codex shows the search."""
    server.upstream.responder = searching(("web_search", {"query": "mount etna eruption"}),
                                          answer="Etna erupts every few years [1].")  # fmt: skip
    home, work = codex_home(tmp_path, server.base_url), tmp_path / "work"
    work.mkdir()
    events = run_codex(home, work, "Is Etna active? Search the web.")
    searches = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "web_search"]
    assert searches and searches[0]["query"] == "mount etna eruption", events
    answer = next(e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message")
    assert answer["text"] == "Etna erupts every few years [1]."
    assert len(engine.requests) == 1 and engine.requests[0]["params"]["q"] == "mount etna eruption"


def test_vercel_ai_sdk_provider_web_search(server, engine):
    """The AI SDK's `openai.tools.webSearch`: a provider-executed call, its result, and the cited source."""
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Etna erupts every few years [1].")
    done = subprocess.run(["node", str(JS / "ai_sdk_web_search.mjs"), server.base_url], capture_output=True,
                          text=True, timeout=120, cwd=JS)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    generate = result["generate"]
    assert generate["text"] == "Etna erupts every few years [1]." and generate["finishReason"] == "stop"
    assert generate["toolCalls"][0]["name"] == "web_search" and generate["toolCalls"][0]["providerExecuted"] is True
    assert generate["toolResults"][0]["name"] == "web_search"
    assert generate["toolResults"][0]["output"]["action"] == {"type": "search", "query": "etna", "queries": ["etna"]}
    assert [s["url"] for s in generate["sources"]] == [f"{engine.site.url}/etna.html"]
    assert generate["sources"][0]["title"] == "Mount Etna"
    stream = result["stream"]
    assert stream["errors"] == [] and stream["sources"] == [f"{engine.site.url}/etna.html"]
    assert {"tool-call", "tool-result", "source", "text-delta"} <= set(stream["partTypes"])


def test_openai_sdk_stream_helper_and_agents_sdk(server, engine):
    """The OpenAI SDK's stream accumulator and the Agents SDK's hosted WebSearchTool take the items as OpenAI's."""
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Etna erupts every few years [1].")
    with server.client().responses.stream(model="test-model", input="Etna?", tools=[{"type": "web_search"}],
                                          include=["web_search_call.action.sources"]) as stream:  # fmt: skip
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.web_search_call.completed") == 1
    search = final.output[0]
    assert search.type == "web_search_call" and search.action.type == "search" and search.action.query == "etna"
    assert len(search.action.sources or ()) == 3 and search.action.sources[0].url.endswith("/etna.html")
    (annotation,) = final.output[-1].content[0].annotations
    assert annotation.type == "url_citation" and annotation.title == "Mount Etna"

    set_tracing_disabled(True)
    agent = Agent(name="researcher", instructions="Search, then answer.", tools=[WebSearchTool(search_context_size="low")],
                  model=OpenAIResponsesModel("test-model", AsyncOpenAI(base_url=server.base_url, api_key="test")))  # fmt: skip
    result = asyncio.run(Runner.run(agent, "Is Etna active?"))
    assert result.final_output == "Etna erupts every few years [1]."
    assert any(getattr(item.raw_item, "type", None) == "web_search_call" for item in result.new_items)
    assert len(engine.requests) == 2


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_background_response_searches(server, engine):
    server.upstream.responder = searching(("web_search", {"query": "etna"}))
    client = server.client()
    started = client.responses.create(model="test-model", input="Etna?", background=True,
                                      tools=[{"type": "web_search"}])  # fmt: skip
    wait_for(lambda: client.responses.retrieve(started.id).status == "completed", timeout=30)
    final = check_response(httpx.get(f"{server.base_url}/responses/{started.id}").json())
    assert [item.type for item in final.output] == ["web_search_call", "message"]
    assert final.output[1].content[0].annotations[0].type == "url_citation" and len(engine.requests) == 1


def test_a_response_has_a_budget_of_web_calls(server, engine, monkeypatch):
    from responsekit.tools.web import tool

    monkeypatch.setattr(tool, "MAX_CALLS", 2)
    server.upstream.responder = searching(*[("web_search", {"query": f"etna {n}"}) for n in range(3)], answer="Done.")
    response = httpx.post(f"{server.base_url}/responses", timeout=60, json={
        "model": "test-model", "input": "Search a lot.", "tools": [{"type": "web_search"}]}).json()  # fmt: skip
    check_response(response)
    assert [item["status"] for item in response["output"][:3]] == ["completed", "completed", "failed"]
    assert tool_outputs(server.upstream)[2] == "Error: This response has used its 2 web calls: answer with what you found."
    assert len(engine.requests) == 2


def test_claude_code_web_search_tool(upstream, engine, tmp_path):
    """Claude Code's WebSearch tool asks the Messages API for Anthropic's web_search server tool;
    ResponseKit runs the search, and Claude Code reads the results back into its own loop."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        offered = [tool["function"]["name"] for tool in body.get("tools") or ()]
        answered = [m for m in body["messages"] if m["role"] == "tool"]
        called = [call["function"]["name"] for m in body["messages"] for call in m.get("tool_calls") or ()]
        if offered == ["web_search"]:  # Claude Code's side request with the server tool alone
            return text_exchange("Etna erupts every few years [1].") if answered else \
                tool_call_exchange("web_search", {"query": "etna eruption"}, call_id="call_search")
        if "WebSearch" in called:
            return text_exchange(f"The search said: {str(answered[-1]['content'])[:600]}")
        if "WebSearch" in offered:
            return tool_call_exchange("WebSearch", {"query": "etna eruption"}, call_id="call_websearch")
        if "ToolSearch" in offered and "ToolSearch" not in called:  # WebSearch is a deferred tool
            return tool_call_exchange("ToolSearch", {"query": "select:WebSearch"}, call_id="call_toolsearch")
        return text_exchange("OK.")

    upstream.responder = respond
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)],  # type: ignore[attr-defined]
                        aliases={"claude-sonnet-4-5": "test-model"}, probe=False, data_dir=tmp_path / "data",
                        allowed_hosts=["127.0.0.1"], web_search_provider="searxng", web_search_url=engine.url)  # type: ignore[attr-defined]  # fmt: skip
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with serve(create_app(settings)) as url:
        env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        events = run_claude(home, work, env, "--model", "claude-sonnet-4-5", prompt="Search the web: is Etna active?")
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False, result
    assert [r["params"]["q"] for r in engine.requests] == ["etna eruption"]
    side = [body for body in upstream.requests if [t["function"]["name"] for t in body.get("tools") or ()] == ["web_search"]]
    assert side[0]["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}, "the search forced"
    # What Claude Code's WebSearch tool gave its own loop: the links and the side answer, from our blocks.
    fed = [m["content"] for m in upstream.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert fed.startswith('Web search results for query: "etna eruption"') and '"title":"Mount Etna"' in fed
    assert "The search said:" in result["result"] and "etna.html" in result["result"], result["result"]


def test_settings_from_flags_environment_and_file(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from responsekit.cli.main import app
    from responsekit.config import load_settings

    config = tmp_path / "responsekit.toml"
    config.write_text('web_search_provider = "brave"\nweb_search_api_key = "from-file"\nweb_search_max_results = 8\n')
    monkeypatch.setenv("RESPONSEKIT_WEB_SEARCH_API_KEY", "from-env")
    settings = load_settings(config, web_search_url="https://search.example.net")
    assert (settings.web_search_provider, settings.web_search_api_key, settings.web_search_max_results,
            settings.web_search_url) == ("brave", "from-env", 8, "https://search.example.net")  # fmt: skip
    refused = CliRunner().invoke(app, ["serve", "--web-search-provider", "bing", "--no-probe"])
    assert refused.exit_code != 0 and "web_search_provider" in refused.output


def test_allowed_tools_may_name_web_search(server, engine):
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}, {"type": "web_search"}]
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Done.")
    for allowed, offered in (([{"type": "web_search"}], ["web_search", "web_open_page", "web_find_in_page"]),
                             ([{"type": "function", "name": "get_weather"}], ["get_weather"])):  # fmt: skip
        before, searched = len(server.upstream.requests), len(engine.requests)
        response = httpx.post(f"{server.base_url}/responses", timeout=60, json={
            "model": "test-model", "input": "Etna?", "tools": tools,
            "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": allowed}}).json()  # fmt: skip
        check_response(response)
        assert [t["function"]["name"] for t in server.upstream.requests[before]["tools"]] == offered
        if "web_search" in offered:
            assert len(engine.requests) == searched + 1
        else:  # the (scripted) model calls the search all the same: not run, and it reads why
            assert len(engine.requests) == searched
            fed = [m["content"] for m in server.upstream.requests[-1]["messages"] if m["role"] == "tool"]
            assert fed == ["Error: The tool web_search is not among the tools allowed for this request."], fed


# --- Messages API: the web_fetch server tool -----------------------------------------------


FETCH_TOOL = {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 3}


def test_messages_fetch_blocks_streamed_and_folded_by_the_sdk(server, site):
    server.upstream.responder = searching(("web_fetch", {"url": f"{site.url}/etna.html"}),
                                          answer="Etna is a World Heritage Site.")  # fmt: skip
    request = {"model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": f"Read {site.url}/etna.html."}],
               "tools": [*MESSAGE_TOOLS, FETCH_TOOL | {"citations": {"enabled": True}, "max_content_tokens": 50}]}  # fmt: skip
    events = messages_stream(server.url, request)  # each event validated against the SDK's types
    use, result, text = [e["content_block"] for e in events if e["type"] == "content_block_start"][-3:]
    assert use["type"] == "server_tool_use" and use["name"] == "web_fetch" and use["id"].startswith("srvtoolu_")
    arguments = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
                        and e["delta"]["type"] == "input_json_delta")  # fmt: skip
    assert json.loads(arguments) == {"url": f"{site.url}/etna.html"}
    assert result["type"] == "web_fetch_tool_result" and result["tool_use_id"] == use["id"]
    page = result["content"]
    assert page["type"] == "web_fetch_result" and page["url"] == f"{site.url}/etna.html" and page["retrieved_at"]
    document = page["content"]
    assert document["type"] == "document" and document["title"] == "Mount Etna"
    assert document["citations"] == {"enabled": True} and document["source"]["media_type"] == "text/plain"
    assert document["source"]["data"].startswith("Mount Etna\nMount Etna, on the east coast of Sicily")
    assert len(document["source"]["data"]) <= 50 * 4 + 2, "max_content_tokens bounds the page (about 4 characters a token)"
    assert "tracking" not in document["source"]["data"] and "Copyright" not in document["source"]["data"]
    assert text == {"type": "text", "text": ""}
    assert events[-2]["usage"]["server_tool_use"] == {"web_search_requests": 0, "web_fetch_requests": 1}
    offered = [tool["function"]["name"] for tool in server.upstream.requests[0]["tools"]]
    assert offered == ["get_weather", "web_fetch"]
    assert tool_outputs(server.upstream)[0].startswith(f"Mount Etna\nURL: {site.url}/etna.html\n\nMount Etna\nMount Etna, on")

    # The anthropic SDK's stream helper folds the same stream into its Message.
    with anthropic_client(server.url).messages.stream(**request) as stream:
        message = stream.get_final_message()
    assert [block.type for block in message.content] == ["server_tool_use", "web_fetch_tool_result", "text"]
    assert message.content[0].input == {"url": f"{site.url}/etna.html"}
    assert message.content[1].content.content.title == "Mount Etna"
    assert message.usage.server_tool_use is not None and message.usage.server_tool_use.web_fetch_requests == 1

    # The turn replayed: the model reads the fetch and the page again.
    server.upstream.responder = lambda body: text_exchange("You are welcome.")
    content = [use | {"input": {"url": f"{site.url}/etna.html"}}, result, {"type": "text", "text": "A heritage site."}]
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={**request, "messages": [
        *request["messages"], {"role": "assistant", "content": content}, {"role": "user", "content": "Thanks"}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    AnthropicMessage.model_validate(answer.json(), strict=True)
    messages = server.upstream.requests[-1]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == use["id"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "web_fetch", "arguments": json.dumps({"url": f"{site.url}/etna.html"})}
    assert messages[2]["role"] == "tool" and messages[2]["content"].startswith(f"Mount Etna\nURL: {site.url}/etna.html")
    assert "east coast of Sicily" in messages[2]["content"]
    assert messages[3] == {"role": "assistant", "content": "A heritage site."}


def test_messages_fetch_reads_pdf_and_text(server, site):
    server.upstream.responder = searching(("web_fetch", {"url": f"{site.url}/stromboli.pdf"}),
                                          ("web_fetch", {"url": f"{site.url}/notes.txt"}), answer="Read both.")  # fmt: skip
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": [
            {"type": "text", "text": f"Read {site.url}/stromboli.pdf"},
            {"type": "text", "text": f"and <{site.url}/notes.txt>."}]}],
        "tools": [FETCH_TOOL]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    message = AnthropicMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["server_tool_use", "web_fetch_tool_result"] * 2 + ["text"]
    pdf, notes = message.content[1].content, message.content[3].content
    assert PDF_TEXT in pdf.content.source.data and notes.content.source.data == NOTES
    assert message.usage.server_tool_use.web_fetch_requests == 2


FETCH_FAILURES = [
    ("/binary", {}, "unsupported_content_type"),
    ("/missing", {}, "url_not_accessible"),
    ("/slow", {}, "url_not_accessible"),
    ("/to-private", {}, "url_not_allowed"),
    ("/etna.html", {"blocked_domains": ["127.0.0.1"]}, "url_not_allowed"),
    ("/etna.html", {"allowed_domains": ["example.org"]}, "url_not_allowed"),
    ("/" + "a" * 300, {}, "url_too_long"),
    ("", {}, "invalid_tool_input"),
]


@pytest.mark.parametrize(("path", "options", "code"), FETCH_FAILURES)
def test_messages_fetch_failures_are_error_blocks(server, site, path, options, code):
    server.upstream.responder = searching(("web_fetch", {"url": f"{site.url}{path}" if path else ""}), answer="Sorry.")
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": f"Read {site.url}{path}"}],
        "tools": [FETCH_TOOL | options]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    message = AnthropicMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["server_tool_use", "web_fetch_tool_result", "text"]
    assert answer.json()["content"][1]["content"] == {"type": "web_fetch_tool_result_error", "error_code": code}
    assert tool_outputs(server.upstream)[0].startswith("Error: ")


def test_messages_fetch_max_uses_and_tool_choice(server, site):
    server.upstream.responder = searching(*[("web_fetch", {"url": f"{site.url}/notes.txt"})] * 2, answer="Done.")
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": f"Read {site.url}/notes.txt twice."}],
        "tools": [FETCH_TOOL | {"max_uses": 1}, ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "web_fetch"}})  # fmt: skip
    assert answer.status_code == 200, answer.text
    message = AnthropicMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["server_tool_use", "web_fetch_tool_result"] * 2 + ["text"]
    assert answer.json()["content"][3]["content"] == {"type": "web_fetch_tool_result_error", "error_code": "max_uses_exceeded"}
    first = server.upstream.requests[0]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_fetch"}}, "the fetch forced"
    assert [t["function"]["name"] for t in first["tools"]] == ["web_search", "web_fetch"]


def test_messages_fetch_only_urls_already_in_the_conversation(server, site, engine):
    """Anthropic's rule: the user's URLs, tool results' and this request's search results' may be
    fetched; one the model makes up (a page's planted instruction, say) is `url_not_in_prior_context`."""
    made_up = f"{site.url}/notes.txt?secret=hunter2"
    server.upstream.responder = searching(("web_fetch", {"url": made_up}), ("web_search", {"query": "etna"}),
                                          ("web_fetch", {"url": f"{site.url}/etna.html"}),
                                          ("web_fetch", {"url": f"{site.url}/stromboli.pdf"}), answer="Done.")  # fmt: skip
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": "What erupts?"}],
        "tools": [ANTHROPIC_TOOL, FETCH_TOOL | {"max_uses": 5}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    message = AnthropicMessage.model_validate(answer.json(), strict=True)
    results = [block.content for block in message.content if block.type == "web_fetch_tool_result"]
    assert results[0].type == "web_fetch_tool_result_error" and results[0].error_code == "url_not_in_prior_context"
    assert [r.type for r in results[1:]] == ["web_fetch_result", "web_fetch_result"], "the search named them"
    assert "/notes.txt" not in site.hits
    assert message.usage.server_tool_use.web_search_requests == 1 and message.usage.server_tool_use.web_fetch_requests == 3


def test_every_fetch_failure_has_an_error_code_of_the_sdk():
    import typing

    from anthropic.types import WebFetchToolResultErrorCode

    from responsekit.api.messages.render import FETCH_ERRORS

    codes = set(typing.get_args(WebFetchToolResultErrorCode))
    assert set(FETCH_ERRORS.values()) <= codes
    outcomes = {"refused", "too_large", "unsupported", "timeout", "unreachable", "http_error"}  # FetchError's
    assert outcomes <= set(FETCH_ERRORS), "each way a page fails has its code"


@pytest.mark.parametrize(("option", "value"), [("max_uses", 0), ("max_content_tokens", "many"),
                                               ("allowed_domains", "example.org"), ("citations", True)])  # fmt: skip
def test_malformed_web_fetch_tools_are_400s(server, option, value):
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 50, "messages": [{"role": "user", "content": "Hi"}],
        "tools": [FETCH_TOOL | {option: value}]})  # fmt: skip
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"


# --- a provider or a page reader that raises what it never should ---------------------------


LXML_GONE = "lxml.html.clean module is now a separate project lxml_html_clean."
"""What reading any HTML page raised where pip had left lxml_html_clean out."""


def break_web(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page reader's HTML extraction and the provider raise errors of no kind they declare,
    inside the server (which runs in this process)."""

    def extract(url: str, body: bytes) -> None:
        raise ImportError(LXML_GONE)

    async def search(self: providers.Provider, query: Any) -> None:
        raise RuntimeError("the provider's client broke")

    monkeypatch.setattr(web_fetch, "_html", extract)
    monkeypatch.setattr(providers.Provider, "search", search)


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    break_web(monkeypatch)


def unexpected(records: list[Any]) -> list[str]:
    """The unexpected failures logged with their tracebacks."""
    return [r.getMessage() for r in records if r.exc_info and "failed unexpectedly" in r.getMessage()]


@pytest.mark.parametrize("streamed", [True, False])
def test_an_unexpected_error_in_a_web_tool_is_a_failed_call_the_model_reads(server, site, broken, streamed, caplog):
    page = f"{site.url}/etna.html"
    server.upstream.responder = searching(("web_search", {"query": "etna"}), ("web_open_page", {"url": page}),
                                          ("web_find_in_page", {"url": page, "pattern": "Sicily"}),
                                          answer="Nothing could be read.")  # fmt: skip
    body = {"model": "test-model", "input": "Etna?", "tools": [{"type": "web_search"}]}
    if streamed:
        _, response = stream(server, body)
    else:
        answer = httpx.post(f"{server.base_url}/responses", timeout=60, json=body)
        assert answer.status_code == 200, answer.text
        response = answer.json()
        check_response(response)
    assert response["status"] == "completed" and response["output_text"] == "Nothing could be read."
    calls = [item for item in response["output"] if item["type"] == "web_search_call"]
    assert [(call["status"], call["action"]) for call in calls] == [
        ("failed", {"type": "search", "query": "etna", "queries": ["etna"]}),
        ("failed", {"type": "open_page", "url": page}),
        ("failed", {"type": "find_in_page", "url": page, "pattern": "Sicily"}),
    ]  # fmt: skip
    search, opened, found = tool_outputs(server.upstream)
    assert search == ("Error: The web search failed: Searching raised an unexpected error on the server "
                      "(RuntimeError: the provider's client broke).")  # fmt: skip
    assert opened == found == (f"Error: The page could not be read: Reading {page} raised an unexpected error on "
                               f"the server (ImportError: {LXML_GONE}).")  # fmt: skip
    assert unexpected(caplog.records) == ["web search (searxng) failed unexpectedly"] + [
        "web fetch (searxng) failed unexpectedly"] * 2  # fmt: skip
    metrics = httpx.get(f"{server.url}/metrics").text
    for operation, count in (("search", 1), ("fetch", 2)):
        assert f'responsekit_web_operations_total{{operation="{operation}",outcome="error",provider="searxng"}} {count}.0' in metrics


@pytest.mark.parametrize("streamed", [True, False])
def test_messages_an_unexpected_error_in_a_web_tool_is_an_error_block(server, site, broken, streamed):
    page = f"{site.url}/etna.html"
    server.upstream.responder = searching(("web_search", {"query": "etna"}), ("web_fetch", {"url": page}),
                                          answer="Nothing could be read.")  # fmt: skip
    request = {"model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": f"Read {page}"}],
               "tools": [ANTHROPIC_TOOL, FETCH_TOOL]}  # fmt: skip
    if streamed:
        with anthropic_client(server.url).messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json=request)
        assert answer.status_code == 200, answer.text
        message = AnthropicMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["server_tool_use", "web_search_tool_result",
                                                         "server_tool_use", "web_fetch_tool_result", "text"]  # fmt: skip
    assert message.content[1].content.model_dump() == {"type": "web_search_tool_result_error", "error_code": "unavailable"}
    assert message.content[3].content.model_dump() == {"type": "web_fetch_tool_result_error", "error_code": "unavailable"}
    assert message.content[4].text == "Nothing could be read." and message.stop_reason == "end_turn"
    search, fetched = tool_outputs(server.upstream)
    assert search.startswith("Error: The web search failed: Searching raised an unexpected error") and "RuntimeError" in search
    assert fetched.startswith("Error: The page could not be read: ") and LXML_GONE in fetched


@pytest.mark.parametrize("streamed", [True, False])
def test_chat_completions_an_unexpected_error_in_the_search_is_read_by_the_model(server, broken, streamed):
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="No search today.")
    body = {"model": "test-model", "messages": [{"role": "user", "content": "Etna?"}], "web_search_options": {},
            "stream": streamed}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/chat/completions", timeout=60, json=body) as answer:
        assert answer.status_code == 200, answer.read()
        if streamed:
            chunks = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")]
            for chunk in chunks:
                check_chat_chunk(chunk)
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
        else:
            text = check_chat_completion(json.loads(answer.read())).choices[0].message.content
    assert text == "No search today."
    (output,) = tool_outputs(server.upstream)
    assert output.startswith("Error: The web search failed: Searching raised an unexpected error") and "RuntimeError" in output


# --- Claude Code's WebFetch: a client tool, with its domain check skipped by `connect claude` ----


def loopback_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (Claude Code's WebFetch asks for https:// even
    when given http://), and its key."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))  # fmt: skip
    cert, private = directory / "site.crt", directory / "site.key"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    return cert, private


def serve_tls(app: Any, cert: Path, key: Path) -> Any:
    """`serve`, over TLS with `cert`."""
    import contextlib
    import threading
    import time

    import uvicorn

    @contextlib.contextmanager
    def running() -> Iterator[str]:
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                               ssl_certfile=str(cert), ssl_keyfile=str(key)))  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the TLS site did not start"
            time.sleep(0.01)
        try:
            yield f"https://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        finally:
            server.should_exit = True
            thread.join(10)

    return running()


def test_claude_code_web_fetch_through_connect_claude(upstream, tmp_path):
    """Claude Code's WebFetch fetches the page itself and has the (small) model read it through
    ResponseKit; `connect claude --write` sets `skipWebFetchPreflight`, so Claude Code does not
    first ask api.anthropic.com whether the domain may be fetched (which fails behind a gateway)."""
    fact = "The volcano is a UNESCO World Heritage Site since 2013."

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        offered = [tool["function"]["name"] for tool in body.get("tools") or ()]
        answered = [m for m in body["messages"] if m["role"] == "tool"]
        called = [call["function"]["name"] for m in body["messages"] for call in m.get("tool_calls") or ()]
        said = json.dumps(body["messages"])
        if not offered and "UNESCO World Heritage Site since 2013" in said:  # WebFetch's reading of the page
            return text_exchange(f"The page says: {fact}")
        if "WebFetch" in called:
            return text_exchange(f"WebFetch gave: {str(answered[-1]['content'])[:600]}")
        if "WebFetch" in offered:
            return tool_call_exchange("WebFetch", {"url": f"{page}/etna.html", "prompt": "Is Etna a heritage site?"},
                                      call_id="call_webfetch")  # fmt: skip
        if "ToolSearch" in offered and "ToolSearch" not in called:  # WebFetch may be a deferred tool
            return tool_call_exchange("ToolSearch", {"query": "select:WebFetch"}, call_id="call_toolsearch")
        return text_exchange("OK.")

    upstream.responder = respond
    site = Site()
    cert, key = loopback_certificate(tmp_path)
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)],  # type: ignore[attr-defined]
                        probe=False, data_dir=tmp_path / "data")  # fmt: skip
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    with serve(create_app(settings)) as url, serve_tls(site.app, cert, key) as page:
        subprocess.run([sys.executable, "-m", "responsekit", "connect", "claude", "--url", url, "--api-key", "test",
                        "--claude-home", str(home / ".claude"), "--write"], check=True, capture_output=True)  # fmt: skip
        written = json.loads((home / ".claude" / "settings.json").read_text())
        assert written["skipWebFetchPreflight"] is True
        events = run_claude(home, work, {"NODE_EXTRA_CA_CERTS": str(cert)},
                            prompt=f"Fetch {page}/etna.html and tell me whether Etna is a heritage site.")
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False, result
    assert site.hits == ["/etna.html"], "Claude Code fetched the page itself, once"
    assert f"WebFetch gave: The page says: {fact}" in result["result"], result["result"]


def test_include_web_search_call_results_adds_no_field_the_item_has_not(server, engine):
    """`web_search_call.results` is one of the spec's `include` values, but its `web_search_call`
    item has only `id`, `type`, `status` and `action`: accepted, and the item stays the spec's
    (the sources come with `web_search_call.action.sources`)."""
    server.upstream.responder = searching(("web_search", {"query": "etna"}))
    for include, sources in ((["web_search_call.results"], False),
                             (["web_search_call.results", "web_search_call.action.sources"], True)):  # fmt: skip
        answer = httpx.post(f"{server.base_url}/responses", timeout=60, json={
            "model": "test-model", "input": "Etna?", "include": include, "tools": [{"type": "web_search"}]})  # fmt: skip
        assert answer.status_code == 200, answer.text
        response = answer.json()
        check_response(response)
        search = response["output"][0]
        assert set(search) == {"id", "type", "status", "action"} and search["status"] == "completed"
        assert ("sources" in search["action"]) is sources


def test_a_fetch_replayed_from_anthropic_reaches_the_model(server):
    """A turn begun on Anthropic's API: its fetched PDF (a base64 document) and a failed fetch."""
    import base64

    server.upstream.responder = lambda body: text_exchange("Noted.")
    pdf = base64.b64encode(pdf_with_text(PDF_TEXT)).decode()
    content = [
        {"type": "server_tool_use", "id": "srvtoolu_01A", "name": "web_fetch", "input": {"url": "https://example.com/s.pdf"}},
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_01A", "content": {
            "type": "web_fetch_result", "url": "https://example.com/s.pdf", "retrieved_at": "2025-08-25T10:30:02Z",
            "content": {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
                        "title": "Stromboli", "citations": {"enabled": True}}}},
        {"type": "server_tool_use", "id": "srvtoolu_01B", "name": "web_fetch", "input": {"url": "https://example.com/x"}},
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_01B",
         "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"}},
        {"type": "text", "text": "Stromboli erupts."},
    ]  # fmt: skip
    answer = httpx.post(f"{server.url}/v1/messages", headers=MESSAGE_HEADERS, timeout=60, json={
        "model": "test-model", "max_tokens": 100, "tools": [FETCH_TOOL], "messages": [
            {"role": "user", "content": "Read https://example.com/s.pdf"}, {"role": "assistant", "content": content},
            {"role": "user", "content": "Thanks"}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    messages = server.upstream.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert messages[2]["content"].startswith("Stromboli\nURL: https://example.com/s.pdf") and PDF_TEXT in messages[2]["content"]
    assert messages[4]["content"] == "Error: the page could not be fetched (url_not_accessible)."
    assert json.loads(messages[3]["tool_calls"][0]["function"]["arguments"]) == {"url": "https://example.com/x"}
