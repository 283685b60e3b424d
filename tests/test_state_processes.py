"""State across processes: two replicas on one PostgreSQL, and a server killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import threading
import time

import asyncpg
import httpx
import pytest

from .conftest import DATABASES
from .harness import (
    check_response,
    check_stream,
    check_terminal_output,
    output,
    read_sse,
    slow_exchange,
    start_cli,  # fmt: skip
    text_exchange,
    wait_for,
)


def replica(upstream, database_url: str, **env: str):
    return start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url", database_url,
                     env={"RESPONSEKIT_LEASE_SECONDS": "1.5", **env})  # fmt: skip


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_two_replicas_share_responses_and_streams(upstream, database_url):
    upstream.time_scale = 1.0
    upstream.push(slow_exchange(60, 0.03), slow_exchange(400, 0.05))
    # Leases so long that no maintenance round runs during the test: a cancellation asked on B
    # reaches A by notification alone.
    first, url_a = replica(upstream, database_url, RESPONSEKIT_LEASE_SECONDS="120")
    second, url_b = replica(upstream, database_url, RESPONSEKIT_LEASE_SECONDS="120")
    try:
        seen: list[dict] = []
        with httpx.stream("POST", f"{url_a}/v1/responses",
                          json={"model": "test-model", "input": "x", "stream": True, "background": True}) as answer:  # fmt: skip
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                if len(seen) == 10:
                    break
        response_id = seen[0]["response"]["id"]
        # The other replica resumes the stream from where the client left it.
        with httpx.stream("GET", f"{url_b}/v1/responses/{response_id}",
                          params={"stream": "true", "starting_after": seen[-1]["sequence_number"]}) as answer:  # fmt: skip
            rest, done = read_sse(answer.iter_lines())
        assert done
        response = check_stream(seen + rest)
        assert response["output_text"] == "x" * 60
        assert check_response(httpx.get(f"{url_b}/v1/responses/{response_id}").json()).status == "completed"

        # A response running on A is cancelled through B.
        queued = httpx.post(f"{url_a}/v1/responses", json={"model": "test-model", "input": "y", "background": True}).json()
        wait_for(lambda: httpx.get(f"{url_b}/v1/responses/{queued['id']}").json()["status"] == "in_progress")
        cancelled = httpx.post(f"{url_b}/v1/responses/{queued['id']}/cancel", timeout=15).json()
        assert cancelled["status"] == "cancelled"
        wait_for(lambda: upstream.cancelled == 1)
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_sigkill_mid_write_leaves_a_consistent_store(upstream, database_url):
    upstream.time_scale = 1.0
    # The background response is still generating when the server is killed (its reasoning done, its text not).
    upstream.responder = lambda body: (
        slow_exchange(1000, 0.01, reasoning="Thinking.") if body["messages"][-1]["content"] == "b"
        else slow_exchange(30, 0.01)
    )  # fmt: skip
    process, url = replica(upstream, database_url)
    finished: list[str] = []

    def client() -> None:
        while True:
            try:
                answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "x"}, timeout=10)
            except httpx.TransportError:
                return
            finished.append(answer.json()["id"])

    background = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "b", "background": True,
                                                         "stream": False}).json()  # fmt: skip
    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(finished) >= 20, timeout=30)
    process.send_signal(signal.SIGKILL)
    process.wait()
    for thread in threads:
        thread.join()

    rows = asyncio.run(_rows(database_url))
    for response_id, status, body, items in rows:
        response = json.loads(body)
        if response["background"]:
            continue
        assert status == response["status"] == "completed"
        assert items == len(response["output"]) + 1, f"{response_id} is stored whole: its input and its output"
    assert set(finished) <= {row[0] for row in rows}, "every answered response was stored"

    upstream.responder = lambda body: text_exchange("after restart")
    process, url = replica(upstream, database_url)
    try:
        for response_id in finished:
            check_response(httpx.get(f"{url}/v1/responses/{response_id}").json())
        # The background response lost its runner: once its lease runs out it is failed, and its stream ends.
        try:
            failed = wait_for(lambda: (r := httpx.get(f"{url}/v1/responses/{background['id']}").json())["status"]
                              == "failed" and r, timeout=15)  # fmt: skip
        except Exception:
            print(output(process))
            raise
        assert failed["error"]["code"] == "server_error"
        with httpx.stream("GET", f"{url}/v1/responses/{background['id']}", params={"stream": "true"}) as answer:
            events, done = read_sse(answer.iter_lines())
        assert done and events[-1]["type"] == "response.failed"
        check_terminal_output(events)  # the reasoning item announced done before the kill is in the output
        assert [item["type"] for item in events[-1]["response"]["output"]] == ["reasoning"]
        assert httpx.get(f"{url}/v1/responses/{background['id']}").json() == events[-1]["response"]
        follow = httpx.post(f"{url}/v1/responses",
                            json={"model": "test-model", "input": "y", "previous_response_id": finished[0]})  # fmt: skip
        assert follow.json()["output_text"] == "after restart"
    finally:
        process.kill()
        process.wait()


async def _rows(database_url: str) -> list[tuple[str, str, str, int]]:
    query = ("SELECT r.id, r.status, r.body, (SELECT COUNT(*) FROM response_items i WHERE i.response_id = r.id) "
             "FROM responses r")  # fmt: skip
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as connection:
            return [tuple(row) for row in connection.execute(query)]
    connection = await asyncpg.connect(database_url)
    try:
        return [tuple(row) for row in await connection.fetch(query)]
    finally:
        await connection.close()


def _streamed_run(url: str) -> tuple[list[dict], threading.Thread]:
    """A streamed background run, its events collected by a thread as they arrive."""
    seen: list[dict] = []

    def follow() -> None:
        with httpx.stream("POST", f"{url}/v1/responses", timeout=30,
                          json={"model": "test-model", "input": "x", "stream": True, "background": True}) as answer:  # fmt: skip
            for line in answer.iter_lines():
                if line.startswith("data: {"):
                    seen.append(json.loads(line[6:]))

    follower = threading.Thread(target=follow)
    follower.start()
    return seen, follower


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_a_background_run_ends_for_its_followers_only_once_stored(upstream, database_url):
    """A client must never see a run complete that a crash could still lose: while
    another transaction holds the response's row, the run cannot store its end, and its
    follower gets every event but the terminal one."""
    upstream.time_scale = 1.0
    upstream.push(slow_exchange(40, 0.05))
    process, url = replica(upstream, database_url)
    holding, release = threading.Event(), threading.Event()
    seen, follower = _streamed_run(url)
    try:
        response_id = wait_for(lambda: seen and seen[0]["response"]["id"])
        wait_for(lambda: httpx.get(f"{url}/v1/responses/{response_id}").json()["status"] == "in_progress")
        locker = threading.Thread(target=lambda: asyncio.run(_hold_row(database_url, response_id, holding, release)))
        locker.start()
        assert holding.wait(10)
        wait_for(lambda: upstream.finished == 1 and any(e["type"] == "response.output_item.done" for e in seen),
                 timeout=15)  # fmt: skip
        follower.join(1)  # time for a terminal event to arrive, were it sent
        assert seen[-1]["type"] == "response.output_item.done", "the end was sent before it was stored"
        release.set()
        locker.join(10)
        follower.join(10)
        assert seen[-1]["type"] == "response.completed"
        assert httpx.get(f"{url}/v1/responses/{response_id}").json()["status"] == "completed"
    finally:
        release.set()
        process.kill()
        process.wait()


async def _hold_row(database_url: str, response_id: str, holding: threading.Event, release: threading.Event) -> None:
    """Lock the response's row as a writer does (`finish_response` waits for it) until `release`."""
    connection = await asyncpg.connect(database_url)
    try:
        async with connection.transaction():
            await connection.execute("SELECT id FROM responses WHERE id = $1 FOR NO KEY UPDATE", response_id)
            holding.set()
            await asyncio.to_thread(release.wait)
    finally:
        await connection.close()


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_a_replica_stalled_past_its_lease_gives_its_run_up(upstream, database_url):
    """A replica that stops (SIGSTOP: a frozen machine, a long pause) for longer than a lease has
    its background run failed by another. Once it runs again it stops that run rather
    than write over the end, and a client it was streaming the run to gets the stored end."""
    upstream.time_scale = 1.0
    upstream.push(slow_exchange(400, 0.02))
    first, url_a = replica(upstream, database_url)
    second, url_b = replica(upstream, database_url)
    seen, follower = _streamed_run(url_a)
    try:
        wait_for(lambda: len(seen) > 20)
        response_id = seen[0]["response"]["id"]
        first.send_signal(signal.SIGSTOP)
        try:
            wait_for(lambda: httpx.get(f"{url_b}/v1/responses/{response_id}").json()["status"] == "failed", timeout=10)
        except AssertionError:
            print(output(second))
            raise
        finally:
            first.send_signal(signal.SIGCONT)
        follower.join(15)
        assert not follower.is_alive(), "the stream on the stalled replica ended"
        assert seen[-1]["type"] == "response.failed" and seen[-1]["response"]["id"] == response_id
        wait_for(lambda: upstream.cancelled == 1, timeout=10)  # it stopped generating
        stored = httpx.get(f"{url_a}/v1/responses/{response_id}").json()
        assert stored["status"] == "failed" and stored["error"]["code"] == "server_error"
    finally:
        first.send_signal(signal.SIGCONT)
        for process in (first, second):
            process.kill()
            process.wait()


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_a_replica_stalled_for_most_of_half_its_lease_keeps_its_run(upstream, database_url):
    """A live replica that stalls (a long pause, an overloaded machine: SIGSTOP here) keeps its
    background run: leases are renewed every sixth of a lease for two thirds of one, so a
    renewal may come half a lease late before another replica, sweeping every sixth
    of a lease, fails the run. Stalls of 0.4 of a lease leave the woken replica 0.3 s to renew."""
    upstream.time_scale = 1.0
    upstream.push(slow_exchange(150, 0.04))
    first, url_a = replica(upstream, database_url, RESPONSEKIT_LEASE_SECONDS="3")
    second, url_b = replica(upstream, database_url, RESPONSEKIT_LEASE_SECONDS="3")
    try:
        response_id = httpx.post(f"{url_a}/v1/responses",
                                 json={"model": "test-model", "input": "x", "background": True}).json()["id"]  # fmt: skip
        wait_for(lambda: httpx.get(f"{url_b}/v1/responses/{response_id}").json()["status"] == "in_progress")
        for _ in range(3):
            first.send_signal(signal.SIGSTOP)
            time.sleep(1.2)
            first.send_signal(signal.SIGCONT)
            time.sleep(0.6)  # it renews at once, then every half second
        done = wait_for(lambda: (r := httpx.get(f"{url_b}/v1/responses/{response_id}").json())["status"]
                        not in ("queued", "in_progress") and r, timeout=15)  # fmt: skip
        assert done["status"] == "completed", output(second)
        assert done["output_text"] == "x" * 150 and upstream.cancelled == 0
    finally:
        first.send_signal(signal.SIGCONT)
        for process in (first, second):
            process.kill()
            process.wait()
