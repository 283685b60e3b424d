"""Two replicas behind a real load balancer (HAProxy) on one PostgreSQL, one of them killed
with SIGKILL under load.

Clients only ever talk to HAProxy, which tells which replica answered in an `x-replica`
header. The test checks what a user of such a deployment relies on: every response a client
saw complete is stored (the surviving replica serves it), the killed replica's background
runs end as failed within a lease of its death (their followers on the other replica see the
end), and the load balancer keeps answering once one replica is gone.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
import pytest

from .conftest import DATABASES
from .harness import free_port, read_sse, slow_exchange, start_cli, wait_for

HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
"""Debian installs HAProxy in /usr/sbin, which a user's PATH may not list."""
LEASE = 3.0
OBSERVING = 0.1
"""How much later than the run's failure the test may see it: it reads the store every 10 ms on
a connection of its own, from a thread that waits for the GIL behind six client threads (5 ms a
switch). The servers get no allowance: the sweep's own work is inside the lease (`runs.py`)."""
SHORT = "x" * 20
"""What every short answer says (20 deltas, 20 ms apart)."""

pytestmark = [
    pytest.mark.skipif(HAPROXY is None, reason="HAProxy is not installed: `make test` installs it (apt-get install haproxy)"),
    pytest.mark.skipif("postgres" not in DATABASES, reason="replicas share a PostgreSQL, and none is available"),
]


@contextmanager
def haproxy(replicas: dict[str, str]) -> Iterator[str]:
    """HAProxy on a free loopback port, round robin over `replicas` (name: base URL), checking
    their `/health` every 200 ms; a request refused by one is retried on another. Yields its URL."""
    port = free_port()
    servers = "\n".join(f"    server {name} {url.removeprefix('http://')}" for name, url in replicas.items())
    config = f"""
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch 1

frontend responsekit
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /health
    http-response set-header x-replica %s
    default-server check inter 200ms fall 2 rise 2
{servers}
"""
    directory = Path(tempfile.mkdtemp(prefix="responsekit-haproxy-"))
    (directory / "haproxy.cfg").write_text(config)
    log = (directory / "haproxy.log").open("w")
    assert HAPROXY
    process = subprocess.Popen([HAPROXY, "-db", "-f", str(directory / "haproxy.cfg")], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/health") or process.poll() is not None, timeout=10)
        assert process.poll() is None, (directory / "haproxy.log").read_text()
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@dataclass
class Load:
    """Clients looping through the load balancer until `stop` is set."""

    url: str
    stop: threading.Event = field(default_factory=threading.Event)
    completed: dict[str, str] = field(default_factory=dict)
    """Responses a client saw complete: id -> output text."""
    attempts: list[tuple[float, bool]] = field(default_factory=list)
    """(when the request started, whether it completed)."""

    def client(self, kind: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    done = self._one(client, kind)
                except httpx.HTTPError:
                    done = None
                self.attempts.append((started, done is not None))
                if done is not None:
                    self.completed[done[0]] = done[1]

    def _one(self, client: httpx.Client, kind: int) -> tuple[str, str] | None:
        body = {"model": "test-model", "input": "short"}
        if kind == 0:  # a plain request
            answer = client.post("/v1/responses", json=body)
            response = answer.json() if answer.status_code == 200 else {}
            return (response["id"], response["output_text"]) if response.get("status") == "completed" else None
        # a stream in the foreground, or a background run the client follows to its end
        body |= {"stream": True, "background": kind == 2}
        with client.stream("POST", "/v1/responses", json=body) as answer:
            if answer.status_code != 200:
                return None
            events, _ = read_sse(answer.iter_lines())
        if events and events[-1]["type"] == "response.completed":
            response = events[-1]["response"]
            text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
            return response["id"], text
        return None


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_replica_killed_under_load_loses_nothing_a_client_saw(upstream, database_url):
    upstream.time_scale = 1.0
    # "long": a background run still generating when the replica dies; the rest are short.
    upstream.responder = lambda body: (
        slow_exchange(200, 0.02) if body["messages"][-1]["content"] == "long" else slow_exchange(20, 0.02)
    )  # fmt: skip
    processes = {}
    try:
        for name in ("a", "b"):
            processes[name] = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", "--database-url",
                                        database_url, env={"RESPONSEKIT_LEASE_SECONDS": str(LEASE)})  # fmt: skip
        with haproxy({name: url for name, (_, url) in processes.items()}) as balancer:
            _under_load(balancer, processes, database_url)
    finally:
        for process, _ in processes.values():
            process.kill()
            process.wait()


def _under_load(balancer: str, processes: dict[str, tuple[subprocess.Popen[str], str]], database_url: str) -> None:
    survivor = processes["b"][1]
    runs: dict[str, str] = {}  # background run id -> the replica running it
    for _ in range(4):  # round robin: two on each replica
        answer = httpx.post(f"{balancer}/v1/responses", json={"model": "test-model", "input": "long", "background": True})
        runs[answer.json()["id"]] = answer.headers["x-replica"]
    assert sorted(runs.values()) == ["a", "a", "b", "b"]
    doomed = [rid for rid, name in runs.items() if name == "a"]

    # A client follows one of A's runs through B: it hears of A's events by notification, then of the end.
    followed: list[dict] = []

    def follow() -> None:
        with httpx.stream("GET", f"{survivor}/v1/responses/{doomed[0]}", params={"stream": "true"}, timeout=30) as answer:
            followed.extend(read_sse(answer.iter_lines())[0])

    follower = threading.Thread(target=follow)
    follower.start()
    load = Load(balancer)
    clients = [threading.Thread(target=load.client, args=(n % 3,)) for n in range(6)]
    for thread in clients:
        thread.start()
    try:
        wait_for(lambda: len(load.completed) >= 15, timeout=30)
        killed = time.monotonic()  # just before the death: the bound is measured conservatively
        processes["a"][0].send_signal(signal.SIGKILL)
        processes["a"][0].wait()
        # A's background runs are marked failed within a lease of its death, while the load goes on.
        failed = asyncio.run(_failed(database_url, doomed, until=killed + LEASE + 5))
        late = {rid: round(at - killed, 3) for rid, at in failed.items()}
        assert len(failed) == len(doomed) and max(late.values()) <= LEASE + OBSERVING, f"failed after {late} s"
        for response_id in doomed:
            assert _get(balancer, response_id)["error"]["code"] == "server_error"
        wait_for(lambda: sum(1 for at, _ in load.attempts if at > killed + 1) >= 15, timeout=30)
    finally:
        load.stop.set()
        for thread in clients:
            thread.join(30)
    follower.join(30)

    # Every response a client saw complete is stored: the surviving replica serves it whole.
    with httpx.Client(base_url=survivor, timeout=10) as client:
        for response_id, text in list(load.completed.items()):
            response = client.get(f"/v1/responses/{response_id}").json()
            assert response["status"] == "completed", response
            assert response["output_text"] == text == SHORT
    # The load balancer kept serving: what was asked once it had seen A go (its checks run every
    # 200 ms) completed on B. Requests A held when it died may fail; nothing else does.
    after = [ok for at, ok in load.attempts if at > killed + 1]
    assert after and all(after), f"{after.count(False)} of {len(after)} requests failed after the kill"

    # B's background runs were not disturbed; the client following A's run through B saw it fail.
    for response_id in runs.keys() - set(doomed):
        wait_for(lambda rid=response_id: _get(balancer, rid)["status"] == "completed", timeout=15)
    assert followed and followed[-1]["type"] == "response.failed"
    assert followed[-1]["response"]["id"] == doomed[0]


async def _failed(database_url: str, response_ids: list[str], until: float) -> dict[str, float]:
    """When (`time.monotonic()`) each of these responses was first seen failed in the store, till `until`."""
    seen: dict[str, float] = {}
    connection = await asyncpg.connect(database_url)
    try:
        while len(seen) < len(response_ids) and time.monotonic() < until:
            rows = await connection.fetch("SELECT id FROM responses WHERE id = ANY($1) AND status = 'failed'", response_ids)
            now = time.monotonic()
            for row in rows:
                seen.setdefault(row["id"], now)
            await asyncio.sleep(0.01)
    finally:
        await connection.close()
    return seen


def _get(balancer: str, response_id: str) -> dict:
    return httpx.get(f"{balancer}/v1/responses/{response_id}", timeout=10).json()
