"""The inspector at `/ui`, in a real browser: Debian's headless Chromium driven by Playwright.

Every test runs the real server on loopback against the scripted engine and looks at the pages
as a user would: the list, a response's page (input, output, timings, request id, chain, the
recorded engine exchange), a conversation's page, a live background run and a foreground stream
in flight whose events arrive while the page is open, a WebSocket-mode response in flight, a stream
whose client leaves mid-flight, and the login a server with API keys asks for.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography.fernet import Fernet
from websockets.sync.client import connect

from responsekit.api.ui.access import SESSION, SESSION_SECONDS
from responsekit.app import create_app
from responsekit.orchestration.sealing import load_keys

from .conftest import DATABASES
from .harness import serve, text_exchange, wait_for

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def browser() -> Iterator[object]:
    """Chromium for one test: Playwright's synchronous API holds an event loop on this thread while
    it runs, which other fixtures' `asyncio.run` (a PostgreSQL database's creation) cannot share."""
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (`make test` installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    context = browser.new_context()
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def create(url: str, key: str | None = None, **body: object) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", **body}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_the_list_shows_a_new_response_and_its_page_shows_what_happened(upstream, settings, tmp_path, page):
    settings.record_dir = tmp_path / "recorded"
    upstream.push(text_exchange("Paris is the capital of France.", reasoning="The user asks about France."),
                  text_exchange("About 2.1 million people live in Paris."), text_exchange("Marseille is in the south."))  # fmt: skip
    with serve(create_app(settings)) as url:
        first = create(url, input="What is the capital of France?").json()
        second_answer = create(url, input="How many people live there?", previous_response_id=first["id"])
        second = second_answer.json()
        conversation = httpx.post(f"{url}/v1/conversations", json={
            "metadata": {"topic": "geography"},
            "items": [{"type": "message", "role": "user", "content": "Where is Lyon?"}],
        }).json()  # fmt: skip

        page.goto(f"{url}/ui")
        rows = page.locator("table.listing tbody tr")
        assert rows.count() == 3
        # Newest first: the conversation and the second response came after the first.
        assert first["id"] in rows.nth(2).inner_text()
        second_row = page.locator(f"tr:has(a[href='/ui/responses/{second['id']}'])").inner_text()
        assert "About 2.1 million people" in second_row and " ms / " in second_row  # first token / total
        assert "geography" in page.locator(f"tr:has(a[href='/ui/conversations/{conversation['id']}'])").inner_text()

        page.click(f"a[href='/ui/responses/{second['id']}']")
        page.wait_for_url(f"**/ui/responses/{second['id']}")
        assert "How many people live there?" in page.locator("section.input").inner_text()
        assert "About 2.1 million people live in Paris." in page.locator("section.output").inner_text()
        facts = page.locator("dl.facts").inner_text()
        assert second_answer.headers["x-request-id"] in facts
        assert "10 input" in facts and "5 output" in facts
        assert page.locator("dd.ttft").inner_text().endswith("ms")  # measured, not "—"
        timeline = page.locator("section.events table").inner_text()
        assert "response.created" in timeline and "response.output_text.delta" in timeline
        assert "response.completed" in timeline
        # The recorded engine exchange: the messages sent (with the history) and the raw chunks.
        page.click("section.exchange summary:has-text('Request body')")
        exchange = page.locator("section.exchange").inner_text()
        assert "POST /chat/completions" in exchange and "What is the capital of France?" in exchange
        assert '"content": "Abo"' in exchange and "[DONE]" in exchange

        page.click(f".chain a[href='/ui/responses/{first['id']}']")
        page.wait_for_url(f"**/ui/responses/{first['id']}")
        assert "The user asks about France." in page.locator("section.output .item.reasoning").inner_text()
        assert "Paris is the capital of France." in page.locator("section.output .item.message").inner_text()

        # A conversation's page links each item a response wrote to that response.
        answer = create(url, input="And Marseille?", conversation=conversation["id"]).json()
        page.goto(f"{url}/ui/conversations/{conversation['id']}")
        items = page.locator("section.items").inner_text()
        assert "Where is Lyon?" in items and "Marseille is in the south." in items
        assert page.locator(".source").all_inner_texts() == [f"Input of {answer['id']}", f"Output of {answer['id']}"]
        page.click(f".source a[href='/ui/responses/{answer['id']}'] >> nth=1")
        page.wait_for_url(f"**/ui/responses/{answer['id']}")

        page.goto(f"{url}/ui?status=failed")
        assert page.locator("table.listing").count() == 0 and "matches these filters" in page.inner_text("main")
        page.goto(f"{url}/ui?kind=conversation")
        assert page.locator("table.listing tbody tr").count() == 1


def test_a_live_run_shows_its_events_as_they_arrive(upstream, settings, page):
    gate = threading.Event()
    script = text_exchange("first half, then the second half.", pieces=4)
    script["chunks"].insert(4, {"gate": gate})  # after "first half, " the engine waits for the test
    upstream.push(script)
    with serve(create_app(settings)) as url:
        try:
            run = create(url, input="Say it in two halves.", background=True).json()
            page.goto(f"{url}/ui")
            assert "live" in page.locator(f"tr:has(a[href='/ui/responses/{run['id']}'])").inner_text()

            page.goto(f"{url}/ui/responses/{run['id']}")
            # Polled from here, not with page.wait_for_function: Playwright evaluates a string
            # predicate again in the page while it is false, an eval the inspector's
            # Content-Security-Policy refuses, so that failed whenever the text came late.
            live_text = page.locator("#live .live-text").first
            wait_for(lambda: live_text.text_content() == "first half, ", timeout=10)
            # The run is still waiting on the engine: these events came while it ran.
            stored = httpx.get(f"{url}/v1/responses/{run['id']}").json()
            assert stored["status"] == "in_progress"
            assert "response.output_text.delta" in page.locator("#live table").inner_text()
        finally:
            gate.set()
        # It ends: the page reloads onto the stored response.
        page.wait_for_selector("section.events table")
        assert "first half, then the second half." in page.locator("section.output").inner_text()
        assert "completed" in page.locator("h1").inner_text()


@contextmanager
def held_stream(url: str, key: str | None = None, **body: object) -> Iterator[tuple[Iterator[str], str]]:
    """A streamed foreground response read up to its first text: its lines to come, and its id."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"model": "test-model", "stream": True, **body}
    with httpx.stream("POST", f"{url}/v1/responses", headers=headers, json=body, timeout=30) as answer:
        lines = answer.iter_lines()
        response_id = None
        for line in lines:
            if line.startswith("data: "):
                event = json.loads(line[6:])
                response_id = response_id or event["response"]["id"]
                if event["type"] == "response.output_text.delta":
                    break
        assert response_id is not None
        yield lines, response_id


def test_a_foreground_stream_in_flight_is_listed_live_and_its_page_follows_it(upstream, settings, page):
    """A streamed response is stored only at its end; while it runs, the inspector lists it from
    the process's flights, and its page shows its events so far, then each as it comes."""
    # Waits by locator: a predicate given as a string is evaluated, which the page's CSP refuses.
    from playwright.sync_api import expect

    before_second, before_end = threading.Event(), threading.Event()
    script = text_exchange("first half, then the second half.", pieces=4)
    script["chunks"].insert(4, {"gate": before_second})  # after "first half, "
    script["chunks"].insert(7, {"gate": before_end})  # after "then the"
    upstream.push(script)
    with serve(create_app(settings)) as url, held_stream(url, input="Say it in two halves.") as (lines, response_id):
        try:
            # The API does not know it before it is stored, as before.
            assert httpx.get(f"{url}/v1/responses/{response_id}").status_code == 404
            page.goto(f"{url}/ui")
            row = page.locator(f"tr:has(a[href='/ui/responses/{response_id}'])").inner_text()
            assert "live" in row and "in_progress" in row
            page.goto(f"{url}/ui?status=completed")
            assert page.locator(f"a[href='/ui/responses/{response_id}']").count() == 0

            page.goto(f"{url}/ui/responses/{response_id}")
            assert "Say it in two halves." in page.locator("section.input").inner_text()
            # The events so far, from the flight's timeline: up to the deltas of "first half, ".
            expect(page.locator("#live table")).to_contain_text("×3 on item 0")
            assert "response.created" in page.locator("#live table").inner_text()
            before_second.set()
            expect(page.locator("#live .live-text")).to_have_text("then the")
            assert "×5 on item 0" in page.locator("#live table").inner_text()  # the same run of deltas, grown
        finally:
            before_second.set()
            before_end.set()
        assert any("response.completed" in line for line in lines)
        # It ends: the page reloads onto the stored response, and the list shows it completed.
        page.wait_for_selector("section.events table")
        assert "first half, then the second half." in page.locator("section.output").inner_text()
        assert "completed" in page.locator("h1").inner_text()
        page.goto(f"{url}/ui")
        row = page.locator(f"tr:has(a[href='/ui/responses/{response_id}'])").inner_text()
        assert "completed" in row and "live" not in row


def test_a_response_over_the_websocket_in_flight_is_listed_live_until_it_ends(upstream, settings, page):
    """The WebSocket mode's responses take off and land in `Orchestrator.events` like a stream's."""
    gate = threading.Event()
    script = text_exchange("Over the socket, slowly.", pieces=4)
    script["chunks"].insert(3, {"gate": gate})
    upstream.push(script)
    with serve(create_app(settings)) as url, connect(f"ws{url.removeprefix('http')}/v1/responses") as socket:
        try:
            socket.send(json.dumps({"type": "response.create", "model": "test-model", "input": "Speak slowly."}))
            created = json.loads(socket.recv(timeout=30))
            assert created["type"] == "response.created"
            response_id = created["response"]["id"]
            page.goto(f"{url}/ui")
            row = page.locator(f"tr:has(a[href='/ui/responses/{response_id}'])").inner_text()
            assert "live" in row and "in_progress" in row
            assert httpx.get(f"{url}/v1/responses/{response_id}").status_code == 404
        finally:
            gate.set()
        while (event := json.loads(socket.recv(timeout=30)))["type"] != "response.completed":
            assert event["type"] not in ("error", "response.failed"), event
        # Landed: stored, and listed from the store, no longer live.
        assert httpx.get(f"{url}/v1/responses/{response_id}").json()["status"] == "completed"
        page.goto(f"{url}/ui")
        row = page.locator(f"tr:has(a[href='/ui/responses/{response_id}'])").inner_text()
        assert "completed" in row and "live" not in row
        assert page.locator("tr.live").count() == 0


def test_a_stream_whose_client_leaves_lands_unstored_and_its_page_ends(upstream, settings, page):
    """A client that leaves mid-flight: the flight is dropped, nothing half-written is stored,
    and a page following it sees its stream end without a terminal event, then finds nothing."""
    from playwright.sync_api import expect

    gate = threading.Event()
    script = text_exchange("first half, then the second half.", pieces=4)
    script["chunks"].insert(4, {"gate": gate})  # after "first half, "
    upstream.push(script)
    app = create_app(settings)
    with serve(app) as url:
        flights = app.state.orchestrator.flights
        try:
            with held_stream(url, input="Say it in two halves.") as (_, response_id):
                page.goto(f"{url}/ui/responses/{response_id}")
                expect(page.locator("#live table")).to_contain_text("×3 on item 0")
                expect(page.locator("#live .live-state")).to_have_text("following")
            # The client left while the engine is held: its stream is cancelled, the flight lands.
            expect(page.locator("#live .live-state")).to_have_text("ended")
            assert flights.of("") == []
            assert response_id not in httpx.get(f"{url}/ui").text
            assert httpx.get(f"{url}/v1/responses/{response_id}").status_code == 404
            assert httpx.get(f"{url}/ui/responses/{response_id}/events").status_code == 404
            # The page reloads onto what the store holds: nothing.
            expect(page.locator("main")).to_contain_text(f"No response {response_id} is stored for you.")
        finally:
            gate.set()


def test_a_flight_is_shown_to_its_owner_only(upstream, settings):
    """With keys, a foreground response in flight, here not streamed, is scoped like a stored one."""
    settings.api_keys = ["key-of-alice", "key-of-bob"]
    gate = threading.Event()
    script = text_exchange("Alice's answer, slowly.", pieces=4)
    script["chunks"].insert(3, {"gate": gate})
    upstream.push(script)
    answered: dict[str, dict[str, object]] = {}
    with serve(create_app(settings)) as url, httpx.Client(base_url=url) as alice, httpx.Client(base_url=url) as bob:
        request = threading.Thread(target=lambda: answered.update(alice=create(url, "key-of-alice", input="Alice asks").json()))
        request.start()
        try:
            for client, key in ((alice, "key-of-alice"), (bob, "key-of-bob")):
                assert client.post("/ui/login", data={"key": key, "next": "/ui"}).status_code == 303
            live = wait_for(lambda: re.search(r'<tr class="response live">\s*<td[^>]*>[^<]*</td>\s*<td class="object">'
                                              r'<a href="/ui/responses/(resp_\w+)"', alice.get("/ui").text))  # fmt: skip
            response_id = live.group(1)
            assert alice.get(f"/ui/responses/{response_id}").status_code == 200
            assert response_id not in bob.get("/ui").text
            assert bob.get(f"/ui/responses/{response_id}").status_code == 404
            assert bob.get(f"/ui/responses/{response_id}/events").status_code == 404
        finally:
            gate.set()
            request.join(30)
        assert answered["alice"]["id"] == response_id


def test_with_keys_the_page_asks_for_one_and_shows_only_its_objects(upstream, settings, page):
    settings.api_keys = ["key-of-alice", "key-of-bob"]
    upstream.push(text_exchange("Alice's answer."), text_exchange("Bob's answer."))
    with serve(create_app(settings)) as url:
        alice = create(url, "key-of-alice", input="Alice asks").json()
        bob = create(url, "key-of-bob", input="Bob asks").json()

        page.goto(f"{url}/ui")
        page.wait_for_url("**/ui/login?next=%2Fui")
        page.fill("input[name=key]", "not-a-key")
        page.click("button[type=submit]")
        assert "not a key of this server" in page.inner_text("main")
        page.fill("input[name=key]", "key-of-alice")
        page.click("button[type=submit]")
        page.wait_for_url(f"{url}/ui")
        listing = page.locator("table.listing").inner_text()
        assert alice["id"] in listing and bob["id"] not in listing
        # The session cookie holds no key, and the page never puts one in a URL.
        (cookie,) = page.context.cookies()
        assert cookie["httpOnly"] and "key-of-alice" not in cookie["value"]
        assert "key-of-alice" not in page.url
        # A login lasts SESSION_SECONDS: the browser drops the cookie then, and the server
        # refuses one sealed longer ago (a copied cookie does not work forever).
        assert abs(cookie["expires"] - (time.time() + SESSION_SECONDS)) < 60
        fernet = Fernet(load_keys(settings.data_dir)[0])
        owner = json.dumps({"kind": SESSION, "text": hashlib.sha256(b"key-of-alice").hexdigest()})
        stale = fernet.encrypt_at_time(owner.encode(), int(time.time()) - SESSION_SECONDS - 60).decode()
        fresh = fernet.encrypt_at_time(owner.encode(), int(time.time()) - SESSION_SECONDS + 60).decode()
        for sealed, status in ((stale, 303), (fresh, 200)):
            answer = httpx.get(f"{url}/ui", cookies={"responsekit_ui": sealed}, follow_redirects=False)
            assert answer.status_code == status

        answer = page.goto(f"{url}/ui/responses/{bob['id']}")
        assert answer.status == 404
        page.goto(f"{url}/ui/responses/{alice['id']}")
        assert "Alice's answer." in page.locator("section.output").inner_text()

        page.click("header button")  # log out
        page.wait_for_url("**/ui/login")
        assert page.goto(f"{url}/ui/responses/{alice['id']}").url.startswith(f"{url}/ui/login")
        # Without the session, nothing is shown nor streamed; a bearer key is no session.
        assert httpx.get(f"{url}/ui", follow_redirects=False).status_code == 303
        bearer = {"authorization": "Bearer key-of-alice"}
        assert httpx.get(f"{url}/ui/responses/{alice['id']}/events", headers=bearer).status_code == 404


def _outside_address() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, a route is chosen
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_without_keys_it_answers_loopback_clients_only(upstream, settings):
    address = _outside_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=address, port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=10)
        port = server.servers[0].sockets[0].getsockname()[1]
        refused = httpx.get(f"http://{address}:{port}/ui")
        assert refused.status_code == 403 and "loopback" in refused.text
        assert httpx.get(f"http://{address}:{port}/ui/responses/resp_x/events").status_code == 403
    finally:
        server.should_exit = True
        thread.join(10)



@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_bad_input_is_a_4xx_page_never_a_500(server):
    """Filters, cursors and ids no database holds (a NUL, a lone surrogate) or no column fits."""
    for path, status in [
        ("/ui?model=%00", 200), ("/ui?model=%ED%A0%80", 200), ("/ui?status=bogus&kind=zzz", 200),
        ("/ui?before=1.2.%00", 200), ("/ui?before=1.2.%ED%A0%80", 200),
        ("/ui?before=99999999999999999999.1.resp_x", 400), ("/ui?before=nonsense", 400),
        ("/ui/responses/%00", 404), ("/ui/responses/%ED%A0%80", 404), ("/ui/conversations/%00", 404),
        ("/ui/responses/resp_x/events?after=abc", 400), ("/ui/responses/resp_x/events", 404),
        ("/ui/static/missing.js", 404),
    ]:  # fmt: skip
        assert httpx.get(f"{server.url}{path}").status_code == status, path
    server.upstream.push(text_exchange("held"))
    run = create(server.url, input="x", background=True).json()
    wait_for(lambda: httpx.get(f"{server.base_url}/responses/{run['id']}").json()["status"] == "completed")
    # Past any sequence number an events column holds: nothing more, not a database error.
    beyond = httpx.get(f"{server.url}/ui/responses/{run['id']}/events", params={"after": 10**20})
    assert beyond.status_code == 200 and beyond.text == "data: [DONE]\n\n"
    # So does the API's resume stream, which read the store for ever (a hang) before.
    resumed = httpx.get(f"{server.base_url}/responses/{run['id']}", params={"stream": "true", "starting_after": 100})
    assert resumed.status_code == 200 and resumed.text == "data: [DONE]\n\n"
    too_far = httpx.get(f"{server.base_url}/responses/{run['id']}", params={"stream": "true", "starting_after": 2**31})
    assert too_far.status_code == 400


def test_a_run_that_lost_its_timeline_shows_its_stored_events(server, database_url):
    """A background run its server did not see end (it died; another replica failed the run) has
    no timeline: its page lists the events stored as it ran, deltas folded, without times."""
    import asyncio

    from responsekit.store import Store

    response = {"id": "resp_lost", "object": "response", "created_at": 1, "status": "in_progress",
                "model": "test-model", "background": True, "output": []}  # fmt: skip
    events = [
        {"type": "response.created", "sequence_number": 0, "response": response},
        *({"type": "response.output_text.delta", "sequence_number": n, "output_index": 0, "delta": "x"}
          for n in (1, 2, 3)),
        {"type": "response.failed", "sequence_number": 4, "response": {**response, "status": "failed"}},
    ]  # fmt: skip

    async def lose() -> None:
        store = await Store.open(database_url)
        try:
            await store.start_response("", response, [], lease_until_ms=0)
            await store.append_events("resp_lost", [(e["sequence_number"], json.dumps(e)) for e in events[:-1]])
            await store.finish_response({**response, "status": "failed"}, [(4, json.dumps(events[-1]))])
        finally:
            await store.close()

    asyncio.run(lose())
    page = httpx.get(f"{server.url}/ui/responses/resp_lost").text
    assert "No times were kept" in page and "response.output_text.delta" in page and "×3 on item 0" in page
