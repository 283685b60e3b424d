"""Engine pools: requests spread over the members serving a model, stick to the
member that caches their prompt, and go elsewhere when a member fails before answering."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from responsekit.app import create_app
from responsekit.backends.affinity import BLOCK, PrefixTree, prefix_path, rendezvous
from responsekit.backends.chat_upstream import ChatUpstream
from responsekit.backends.pool import Member, Pool
from responsekit.canonical.conversation import GenerationRequest, Message, TextPart
from responsekit.config import Settings, UpstreamConfig

from .harness import (
    ScriptedUpstream,
    check_stream,
    read_sse,
    serve,
    slow_exchange,
    text_exchange,
    wait_for,
)
from .test_completions_backend import ScriptedCompletions

MODEL = "test-model"


@contextmanager
def _engine(name: str, port: int = 0) -> Iterator[ScriptedUpstream]:
    """A scripted engine that says its name in every answer."""
    engine = ScriptedUpstream()
    engine.responder = lambda body: text_exchange(f"Served by {name}.")
    with serve(engine.app, port) as url:
        engine.url = f"{url}/v1"  # type: ignore[attr-defined]
        yield engine


@contextmanager
def _gateway(tmp_path: Path, *upstreams: UpstreamConfig, balance: str = "affinity") -> Iterator[str]:
    settings = Settings(upstreams=list(upstreams), probe=False, balance=balance,  # type: ignore[arg-type]
                        database_url=f"sqlite:///{tmp_path / 'state.db'}")  # fmt: skip
    with serve(create_app(settings)) as url:
        yield url


@pytest.fixture
def pair() -> Iterator[tuple[ScriptedUpstream, ScriptedUpstream]]:
    with _engine("a") as a, _engine("b") as b:
        yield a, b


def _upstreams(a: ScriptedUpstream, b: ScriptedUpstream) -> list[UpstreamConfig]:
    return [UpstreamConfig(name="a", base_url=a.url), UpstreamConfig(name="b", base_url=b.url)]  # type: ignore[attr-defined]


def _chat(url: str, text: str, **extra: Any) -> str:
    """The member that answered a chat completion."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return _served_by(answer.json()["choices"][0]["message"]["content"])


def _respond(url: str, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v1/responses", json={"model": MODEL, **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _served_by(text: str) -> str:
    assert text.startswith("Served by "), text
    return text.removeprefix("Served by ").rstrip(".")


# --- pools -------------------------------------------------------------------------------


@pytest.mark.parametrize("balance", ["affinity", "least_loaded", "round_robin"])
def test_unrelated_requests_spread_over_the_pool(pair, tmp_path, balance):
    """Spread evenly; before pools, the first upstream serving a model got all 20."""
    with _gateway(tmp_path, *_upstreams(*pair), balance=balance) as url:
        served = [_chat(url, f"Unrelated question number {n}?") for n in range(20)]
    assert served.count("a") == served.count("b") == 10
    assert [len(engine.requests) for engine in pair] == [10, 10]


def test_a_busy_member_takes_no_unrelated_request(pair, tmp_path):
    """Least in flight: while one member streams a long answer, the others take the new requests."""
    a, b = pair
    for engine in pair:
        engine.time_scale = 1.0
    for engine, name in ((a, "a"), (b, "b")):
        engine.responder = lambda body, name=name: (
            slow_exchange(40, 0.1) if "slow" in json.dumps(body) else text_exchange(f"Served by {name}.")
        )
    with _gateway(tmp_path, *_upstreams(a, b), balance="least_loaded") as url:
        done = threading.Event()

        def slow() -> None:
            httpx.post(f"{url}/v1/chat/completions", timeout=30,
                       json={"model": MODEL, "messages": [{"role": "user", "content": "slow"}]})  # fmt: skip
            done.set()

        threading.Thread(target=slow, daemon=True).start()
        busy = wait_for(lambda: a if a.requests else b if b.requests else None)
        served = [_chat(url, f"Quick question {n}?") for n in range(5)]
        assert not done.is_set()  # the slow answer was streaming all along
        done.wait(30)
    idle = "b" if busy is a else "a"
    assert served == [idle] * 5


def test_health_and_metrics_show_each_member(pair, tmp_path):
    with _gateway(tmp_path, *_upstreams(*pair)) as url:
        health = httpx.get(f"{url}/health").json()
        metrics = httpx.get(f"{url}/metrics").text
    assert health["pools"] == [{"name": MODEL, "model": MODEL, "balance": "affinity", "members": ["a", "b"]}]
    states = {entry["name"]: (entry["state"], entry["in_flight"], entry["models"]) for entry in health["upstreams"]}
    assert states == {"a": ("healthy", 0, [MODEL]), "b": ("healthy", 0, [MODEL])}
    assert 'responsekit_upstream_healthy{upstream="a"} 1.0' in metrics
    assert 'responsekit_upstream_in_flight{upstream="b"} 0.0' in metrics


def test_a_named_pool_keeps_its_members_apart_from_others(pair, tmp_path):
    """`pool` groups upstreams explicitly: the model's first upstream's pool serves it, and an
    upstream outside that pool gets none of its requests."""
    a, b = pair
    with _engine("c") as c:
        upstreams = [UpstreamConfig(name="c", base_url=c.url, pool="small"),  # type: ignore[attr-defined]
                     UpstreamConfig(name="b", base_url=b.url),  # type: ignore[attr-defined]
                     UpstreamConfig(name="a", base_url=a.url, pool="small")]  # type: ignore[attr-defined]  # fmt: skip
        with _gateway(tmp_path, *upstreams) as url:
            served = {_chat(url, f"Unrelated question number {n}?") for n in range(6)}
            pools = httpx.get(f"{url}/health").json()["pools"]
    assert served == {"a", "c"} and not b.requests
    assert pools == [{"name": "small", "model": MODEL, "balance": "affinity", "members": ["c", "a"]}]


# --- cache affinity ----------------------------------------------------------------------


def test_requests_sharing_a_prompt_cache_key_stick_to_one_member(pair, tmp_path):
    with _gateway(tmp_path, *_upstreams(*pair)) as url:
        homes = {key: {_chat(url, f"Question {n} of {key}?", prompt_cache_key=key) for n in range(4)}
                 for key in (f"project-{k}" for k in range(8))}  # fmt: skip
    assert all(len(members) == 1 for members in homes.values()), homes
    assert set().union(*homes.values()) == {"a", "b"}  # rendezvous spreads the keys


def test_an_anthropic_session_sticks_to_one_member(pair, tmp_path):
    with _gateway(tmp_path, *_upstreams(*pair)) as url:

        def message(session: str, n: int) -> str:
            body = {"model": MODEL, "max_tokens": 64, "metadata": {"user_id": f"user_x_account__session_{session}"},
                    "messages": [{"role": "user", "content": f"Turn {n} of {session}"}]}  # fmt: skip
            answer = httpx.post(f"{url}/v1/messages", json=body, timeout=30)
            assert answer.status_code == 200, answer.text
            return _served_by(answer.json()["content"][-1]["text"])

        homes = {session: {message(session, n) for n in range(4)} for session in ("s1", "s2", "s3", "s4", "s5", "s6")}
    assert all(len(members) == 1 for members in homes.values()), homes
    assert set().union(*homes.values()) == {"a", "b"}


def test_a_conversation_sticks_to_one_member(pair, tmp_path):
    with _gateway(tmp_path, *_upstreams(*pair)) as url:
        homes = {}
        for _ in range(4):
            conversation = httpx.post(f"{url}/v1/conversations", json={}).json()["id"]
            homes[conversation] = {_served_by(_respond(url, input=f"Turn {n}", conversation=conversation)["output_text"])
                                   for n in range(4)}  # fmt: skip
    assert all(len(members) == 1 for members in homes.values()), homes


def test_a_previous_response_id_chain_sticks_to_one_member(pair, tmp_path):
    """Every turn carries the chain's key, the first included (it is named by the first turn's
    first item): the whole chain lands where its first turn did."""
    with _gateway(tmp_path, *_upstreams(*pair)) as url:
        homes = []
        for chain in range(6):
            first = _respond(url, input=f"Chain {chain} begins")
            previous = first["id"]
            served = {_served_by(first["output_text"])}
            for turn in range(4):
                response = _respond(url, input=f"Chain {chain} turn {turn}", previous_response_id=previous)
                served.add(_served_by(response["output_text"]))
                previous = response["id"]
            homes.append(served)
    assert all(len(members) == 1 for members in homes), homes


def test_stateless_replays_follow_their_prefix(pair, tmp_path):
    """A client that replays its whole history each turn (Codex with `store: false`) carries no key:
    the member that served the earlier turns holds their prefix and takes the next ones."""
    with _gateway(tmp_path, *_upstreams(*pair)) as url:
        conversations = {
            n: [{"role": "user", "content": f"Conversation {n}: " + "a long shared context. " * 40}] for n in range(4)
        }
        served: dict[int, list[str]] = {n: [] for n in conversations}
        for turn in range(4):
            for n, history in conversations.items():  # interleaved, as concurrent clients would be
                answer = _respond(url, input=history, store=False)
                served[n].append(_served_by(answer["output_text"]))
                history += [{"role": "assistant", "content": answer["output_text"]},
                            {"role": "user", "content": f"Turn {turn + 1}, tell me more."}]  # fmt: skip
    assert all(len(set(members)) == 1 for members in served.values()), served
    assert {members[0] for members in served.values()} == {"a", "b"}  # the first turns spread


def test_a_key_moves_off_its_member_while_that_member_is_overloaded(pair, tmp_path):
    """Bounded load over HTTP: three long streams of one key hold its member (3 in flight, the
    pool's average 1.5, the bound 2.875), so the key's next request goes to the other member."""
    a, b = pair
    for engine, name in ((a, "a"), (b, "b")):
        engine.time_scale = 1.0
        engine.responder = lambda body, name=name: (
            slow_exchange(60, 0.1) if "slow" in json.dumps(body) else text_exchange(f"Served by {name}.")
        )
    with _gateway(tmp_path, *_upstreams(a, b)) as url:

        def slow(n: int) -> None:
            httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
                "model": MODEL, "prompt_cache_key": "hot", "messages": [{"role": "user", "content": f"slow {n}"}]})  # fmt: skip

        for n in range(3):
            threading.Thread(target=slow, args=(n,), daemon=True).start()
            wait_for(lambda n=n: len(a.requests) + len(b.requests) == n + 1)
        home = a if a.requests else b
        assert len(home.requests) == 3  # the key's member took its first three
        moved = _chat(url, "A quick one", prompt_cache_key="hot")
    assert moved == ("b" if home is a else "a")


# --- the balancer, as a unit --------------------------------------------------------------


def _members(*names: str) -> list[Member]:
    return [Member(ChatUpstream(UpstreamConfig(name=name, base_url=f"http://127.0.0.1:9/{name}"))) for name in names]


def _request(text: str, key: str | None = None) -> GenerationRequest:
    return GenerationRequest(model=MODEL, messages=[Message("user", [TextPart(text)])], affinity_key=key)


def test_bounded_load_moves_a_key_off_an_overloaded_member():
    members = _members("a", "b", "c")
    pool = Pool("p", members)
    home = rendezvous("hot", members, name=lambda member: member.name)
    home.in_flight = 2  # average 2/3: the bound is 1.25 × 2/3 + 1 ≈ 1.83
    moved = pool.choose(_request("short", "hot"))
    assert moved is not home
    home.in_flight = 1  # bound 1.25 × 1/3 + 1 ≈ 1.42: still open to its keys
    assert pool.choose(_request("short", "hot")) is home


def test_bounded_load_moves_a_prefix_off_an_overloaded_member():
    members = _members("a", "b")
    pool = Pool("p", members)
    text = "A long prompt that one member served. " * 20
    first = pool.choose(_request(text))
    assert pool.choose(_request(text + " And more.")) is first
    first.in_flight = 3
    assert pool.choose(_request(text + " And more.")) is not first


def test_rendezvous_moves_only_the_keys_of_a_member_that_leaves():
    names = ["a", "b", "c", "d"]
    keys = [f"key-{n}" for n in range(2000)]
    before = {key: rendezvous(key, names, name=str) for key in keys}
    after = {key: rendezvous(key, ["a", "b", "d"], name=str) for key in keys}
    moved = {key for key in keys if before[key] != after[key]}
    assert moved == {key for key in keys if before[key] == "c"}
    assert 0.2 < len(moved) / len(keys) < 0.3  # a quarter of the keys: the leaver's share
    joined = {key: rendezvous(key, [*names, "e"], name=str) for key in keys}
    assert {joined[key] for key in keys if joined[key] != before[key]} == {"e"}


def test_a_prefix_tree_is_bounded_and_loses_its_leaves_first():
    tree = PrefixTree(capacity=8)
    old = prefix_path("x" * BLOCK * 6)
    tree.add(old)
    tree.add(prefix_path("y" * BLOCK * 4))
    assert len(tree) == 8
    assert tree.matched(old) == 4  # its two deepest nodes went first; the prefix still matches
    assert tree.matched(prefix_path("y" * BLOCK * 4 + "z" * BLOCK)) == 4


# --- failover ------------------------------------------------------------------------------


def test_a_dead_member_is_passed_over_then_rejoins_when_it_answers(pair, tmp_path, unused_port):
    a, _ = pair
    upstreams = [UpstreamConfig(name="a", base_url=a.url, pool="p"),  # type: ignore[attr-defined]
                 UpstreamConfig(name="dead", base_url=f"http://127.0.0.1:{unused_port}/v1", pool="p")]  # fmt: skip
    with _gateway(tmp_path, *upstreams) as url:
        served = [_chat(url, f"Unrelated question number {n}?") for n in range(10)]
        health = httpx.get(f"{url}/health").json()
        metrics = httpx.get(f"{url}/metrics").text
        assert served == ["a"] * 10
        dead = next(entry for entry in health["upstreams"] if entry["name"] == "dead")
        assert dead["state"] == "cooling" and dead["failures"] >= 1 and dead["models"] == [MODEL]
        assert dead["reachable"] is False
        assert 'responsekit_upstream_healthy{upstream="dead"} 0.0' in metrics
        with _engine("revived", unused_port):

            def healthy() -> bool:
                entries = httpx.get(f"{url}/health").json()["upstreams"]
                return next(entry for entry in entries if entry["name"] == "dead")["state"] == "healthy"

            wait_for(healthy, timeout=15)
            entries = httpx.get(f"{url}/health").json()["upstreams"]
            assert next(entry for entry in entries if entry["name"] == "dead")["reachable"] is True
            assert {_chat(url, f"Another question {n}?") for n in range(4)} == {"a", "revived"}
            assert 'responsekit_upstream_healthy{upstream="dead"} 1.0' in httpx.get(f"{url}/metrics").text


def test_health_says_a_member_killed_after_start_is_unreachable(pair, tmp_path, unused_port):
    """A member that listed its models, then died: `/health` says what is true now, not what its
    listing said at startup."""
    a, _ = pair
    upstreams = [UpstreamConfig(name="a", base_url=a.url, pool="p"),  # type: ignore[attr-defined]
                 UpstreamConfig(name="doomed", base_url=f"http://127.0.0.1:{unused_port}/v1", pool="p")]  # fmt: skip
    with ExitStack() as doomed_engine:
        doomed_engine.enter_context(_engine("doomed", unused_port))
        with _gateway(tmp_path, *upstreams) as url:
            before = next(entry for entry in httpx.get(f"{url}/health").json()["upstreams"] if entry["name"] == "doomed")
            assert before["reachable"] is True and before["state"] == "healthy"
            doomed_engine.close()
            served = [_chat(url, f"Unrelated question number {n}?") for n in range(6)]
            after = next(entry for entry in httpx.get(f"{url}/health").json()["upstreams"] if entry["name"] == "doomed")
    assert set(served) == {"a"}
    assert after["state"] == "cooling" and after["reachable"] is False


def test_a_member_answering_503_is_retried_on_another(pair, tmp_path):
    """The pool's first pick (`a`, its first member, when all are idle) answers 503: the client
    gets `b`'s answer and never sees the 503."""
    a, b = pair
    a.push({"status": 503, "error_body": json.dumps({"error": {"message": "Loading model"}})})
    with _gateway(tmp_path, *_upstreams(a, b)) as url:
        served = _chat(url, "Who answers?")
        health = {entry["name"]: entry for entry in httpx.get(f"{url}/health").json()["upstreams"]}
    assert served == "b" and len(a.requests) == len(b.requests) == 1
    assert health["a"]["state"] == "cooling" and health["a"]["failures"] == 1
    assert health["b"]["state"] == "healthy" and health["b"]["failures"] == 0


def test_a_stream_that_began_is_never_retried(pair, tmp_path):
    """Once the client saw an event, a member dying mid-stream fails the stream as today."""
    def started_then_dropped() -> dict[str, Any]:
        script = text_exchange("Part of an answer that never ends")
        script["chunks"] = script["chunks"][:4]
        script["end"] = "drop"
        return script

    for engine in pair:
        engine.push(started_then_dropped())
    with _gateway(tmp_path, *_upstreams(*pair)) as url:
        with httpx.stream("POST", f"{url}/v1/responses", json={"model": MODEL, "input": "x", "stream": True}) as r:
            response = check_stream(read_sse(r.iter_lines())[0])
    assert response["status"] == "failed" and response["output_text"].startswith("Part of")
    assert sum(len(engine.requests) for engine in pair) == 1


def test_a_dead_completions_member_is_passed_over_before_its_template_is_asked(tmp_path, unused_port):
    """An `api = "completions"` member first asks the engine for its template (`/props`): an engine
    that went away fails over there like one that refuses the generation."""
    live, dying = ScriptedCompletions("llamacpp"), ScriptedCompletions("llamacpp")
    with serve(live.app) as live_url, ExitStack() as stack:
        stack.enter_context(serve(dying.app, unused_port))
        upstreams = [UpstreamConfig(name="dying", base_url=f"http://127.0.0.1:{unused_port}/v1", api="completions",
                                    kind="llamacpp", pool="raw"),
                     UpstreamConfig(name="live", base_url=f"{live_url}/v1", api="completions", kind="llamacpp",
                                    pool="raw")]  # fmt: skip
        with _gateway(tmp_path, *upstreams, balance="round_robin") as url:
            stack.close()  # it listed its models, then went away
            answers = [httpx.post(f"{url}/v1/responses", json={"model": "tiny", "input": f"Hi {n}"}, timeout=30).json()
                       for n in range(4)]  # fmt: skip
            dying_state = next(e for e in httpx.get(f"{url}/health").json()["upstreams"] if e["name"] == "dying")
    assert [answer["output_text"] for answer in answers] == ["Hello there"] * 4
    assert len(live.requests) == 4 and not dying.requests
    assert dying_state["state"] == "cooling"
