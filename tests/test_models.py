"""Model routing: several upstreams, aliases, a default model, probing the usual local ports."""

from __future__ import annotations

import socket

import httpx
import pytest

from responsekit.app import create_app
from responsekit.backends import router as router_module
from responsekit.config import Settings, UpstreamConfig

from .harness import ScriptedUpstream, check_response, serve, text_exchange


@pytest.fixture
def two_engines():
    first, second = ScriptedUpstream(("qwen3-coder",), "llamacpp"), ScriptedUpstream(("llama-3",), "vllm")
    with serve(first.app) as one, serve(second.app) as two:
        yield (first, f"{one}/v1"), (second, f"{two}/v1")


def test_routing_aliases_and_default_model(two_engines):
    (first, url_one), (second, url_two) = two_engines
    settings = Settings(
        upstreams=[UpstreamConfig(name="coder", base_url=url_one), UpstreamConfig(name="chat", base_url=url_two)],
        aliases={"gpt-5-codex": "qwen3-coder"},
        default_model="llama-3",
        probe=False,
    )
    with serve(create_app(settings)) as url:
        models = httpx.get(f"{url}/v1/models").json()
        assert models["object"] == "list"
        assert {(m["id"], m["owned_by"]) for m in models["data"]} == {
            ("qwen3-coder", "coder"), ("llama-3", "chat"), ("gpt-5-codex", "coder"),
        }  # fmt: skip
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok"
        assert [(u["name"], u["kind"], u["reachable"]) for u in health["upstreams"]] == [
            ("coder", "llamacpp", True), ("chat", "vllm", True),
        ]  # fmt: skip

        for asked, engine, served in [("gpt-5-codex", first, "qwen3-coder"), ("llama-3", second, "llama-3"),
                                      ("gpt-4o", second, "llama-3")]:  # fmt: skip
            engine.push(text_exchange("hi"))
            answer = httpx.post(f"{url}/v1/responses", json={"model": asked, "input": "x"})
            assert answer.status_code == 200
            assert check_response(answer.json()).model == asked
            assert engine.requests[-1]["model"] == served


def test_engine_kind_sets_the_dialect(two_engines):
    (first, url_one), _ = two_engines
    first.owned_by = "openai"
    settings = Settings(upstreams=[UpstreamConfig(base_url=url_one, kind="openai")], probe=False)
    with serve(create_app(settings)) as url:
        first.push(text_exchange("hi"))
        body = {"model": "qwen3-coder", "input": [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}],
                "max_output_tokens": 20, "reasoning": {"effort": "low"}, "prompt_cache_key": "k"}  # fmt: skip
        assert httpx.post(f"{url}/v1/responses", json=body).status_code == 200
        sent = first.requests[-1]
        assert sent["messages"][0] == {"role": "developer", "content": "d"}
        assert sent["max_completion_tokens"] == 20 and sent["reasoning_effort"] == "low"
        assert "chat_template_kwargs" not in sent and sent["prompt_cache_key"] == "k"


def test_per_upstream_options_override_the_kind(two_engines):
    (first, url_one), _ = two_engines
    config = UpstreamConfig(base_url=url_one, merge_system=False, reasoning_effort_param="none",
                            reasoning_history_field="reasoning")  # fmt: skip
    with serve(create_app(Settings(upstreams=[config], probe=False))) as url:
        first.push(text_exchange("hi"))
        body = {"model": "qwen3-coder", "reasoning": {"effort": "high"}, "input": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"type": "reasoning", "id": "rs", "summary": [], "content": [{"type": "reasoning_text", "text": "r"}]},
            {"role": "assistant", "content": "a"}, {"role": "developer", "content": "later"},
        ]}  # fmt: skip
        assert httpx.post(f"{url}/v1/responses", json=body).status_code == 200
        sent = first.requests[-1]
        assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "system"]
        assert sent["messages"][2]["reasoning"] == "r"
        assert "reasoning_effort" not in sent and "chat_template_kwargs" not in sent


def _free_probe_target() -> tuple[str, str, int]:
    for kind, url in router_module.PROBE_TARGETS:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return kind, url, port
    raise AssertionError("every usual engine port is taken on this machine")


def test_probing_finds_a_local_engine_and_starts_without_one():
    with serve(create_app(Settings(probe=True, default_model_fallback=False))) as url:
        # With nothing to find (and the embedded default model off), the server starts anyway and says so.
        health = httpx.get(f"{url}/health").json()
    assert not any(u["reachable"] for u in health["upstreams"]), f"a real engine answers on a usual port: {health}"
    assert health["status"] == "no_upstream" and "--upstream" in health["message"]
    assert "default_model" not in health

    kind, probe_url, port = _free_probe_target()
    engine = ScriptedUpstream(("local-model",), owned_by="whatever")
    with serve(engine.app, port=port), serve(create_app(Settings(probe=True))) as url:
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok"
        # An engine found by probing wins over the embedded default model.
        assert [(u["name"], u["base_url"], u["kind"]) for u in health["upstreams"]] == [(kind, probe_url, kind)]
        assert "default_model" not in health
        engine.push(text_exchange("found you"))
        answer = httpx.post(f"{url}/v1/responses", json={"model": "local-model", "input": "x"})
        assert answer.json()["output_text"] == "found you"


def test_unknown_models_trigger_a_refresh(two_engines, monkeypatch):
    (first, url_one), _ = two_engines
    monkeypatch.setattr(router_module, "REFRESH_INTERVAL", 0.0)
    with serve(create_app(Settings(upstreams=[UpstreamConfig(base_url=url_one)], probe=False))) as url:
        first.models.append("loaded-later")
        first.push(text_exchange("hi"))
        answer = httpx.post(f"{url}/v1/responses", json={"model": "loaded-later", "input": "x"})
        assert answer.status_code == 200


@pytest.mark.parametrize("vision_model", [None, "llama-3"])
def test_the_models_list_tells_which_take_images(two_engines, vision_model):
    """Images reach a model that reads them, or may (nobody said), or that the vision model
    describes them for; a model configured text-only, with no vision model, gets notes only."""
    (_, url_one), (_, url_two) = two_engines
    settings = Settings(upstreams=[UpstreamConfig(name="coder", base_url=url_one, vision=False),
                                   UpstreamConfig(name="chat", base_url=url_two)],
                        aliases={"gpt-5-codex": "qwen3-coder"}, vision_model=vision_model, probe=False)  # fmt: skip
    with serve(create_app(settings)) as url:
        models = httpx.get(f"{url}/v1/models").json()["data"]
        text_only = ["text"] if vision_model is None else ["text", "image"]
        assert {m["id"]: m["input_modalities"] for m in models} == {
            "qwen3-coder": text_only, "gpt-5-codex": text_only, "llama-3": ["text", "image"],
        }  # fmt: skip
