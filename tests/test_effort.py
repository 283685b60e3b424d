"""Reasoning effort and thinking budgets per model: every client's level reaches the engine as one
its model accepts, and a budget reaches the engines that take one, in their own field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from responsekit.app import create_app
from responsekit.backends.thinking_budget import ThinkingBudget
from responsekit.canonical.conversation import GenerationRequest, Message, TextPart
from responsekit.config import Settings, UpstreamConfig
from responsekit.prompting.effort import accepted, budget
from responsekit.prompting.templates import ChatTemplate, template_options

from .harness import ScriptedUpstream, serve, text_exchange

LEVELS = ("low", "medium", "high")


def strict(levels: tuple[str, ...] = LEVELS):
    """An engine that refuses a level its model does not accept, as a strict template does."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        effort = body.get("reasoning_effort", (body.get("chat_template_kwargs") or {}).get("reasoning_effort"))
        if effort is not None and effort not in levels:
            return {"status": 400, "error_body": json.dumps({"error": {"message": f"bad effort {effort}"}})}
        return text_exchange("ok")

    return answer


@pytest.fixture(params=["llamacpp", "vllm", "sglang", "ollama"])
def engine(request) -> Iterator[tuple[ScriptedUpstream, str, str]]:
    upstream = ScriptedUpstream(("m",), request.param)
    upstream.responder = strict(("none", *LEVELS) if request.param == "ollama" else LEVELS)
    with serve(upstream.app) as engine_url:
        settings = Settings(upstreams=[UpstreamConfig(base_url=f"{engine_url}/v1", kind=request.param)], probe=False)
        with serve(create_app(settings)) as url:
            yield upstream, url, request.param


def ask(url: str, client: str, effort: str | None = None, **extra: Any) -> httpx.Response:
    """One request in `client`'s protocol asking for `effort` (None: only what `extra` says)."""
    if client == "responses":
        body = {"model": "m", "input": "x", **({"reasoning": {"effort": effort}} if effort else {}), **extra}
        return httpx.post(f"{url}/v1/responses", json=body, timeout=30)
    if client == "chat":
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}],
                **({"reasoning_effort": effort} if effort else {}), **extra}  # fmt: skip
        return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    if client == "messages":
        body = {"model": "m", "max_tokens": 30000, "messages": [{"role": "user", "content": "x"}],
                **({"output_config": {"effort": effort}} if effort else {}), **extra}  # fmt: skip
        headers = {"anthropic-version": "2023-06-01", "x-api-key": "k"}
        return httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=30)
    config = {"thinkingConfig": {"thinkingLevel": effort}} if effort else {}
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "generationConfig": config, **extra}
    return httpx.post(f"{url}/v1beta/models/m:generateContent", json=body, timeout=30)


@pytest.mark.parametrize(("client", "effort", "sent"), [
    ("responses", "minimal", "low"), ("responses", "xhigh", "high"), ("responses", "max", "high"),
    ("responses", "none", "low"), ("chat", "max", "high"), ("chat", "minimal", "low"), ("chat", "medium", "medium"),
    ("messages", "max", "high"), ("messages", "xhigh", "high"), ("messages", "low", "low"),
    ("gemini", "MINIMAL", "low"), ("gemini", "HIGH", "high"),
])  # fmt: skip
def test_each_clients_level_reaches_the_engine_as_one_it_accepts(engine, client, effort, sent):
    upstream, url, kind = engine
    answer = ask(url, client, effort)
    assert answer.status_code == 200, answer.text
    body = upstream.requests[-1]
    assert body["reasoning_effort"] == ("none" if kind == "ollama" and effort == "none" else sent), "Ollama's off"
    if kind != "ollama":
        assert body["chat_template_kwargs"] == {"reasoning_effort": sent, "enable_thinking": effort != "none"}


@pytest.mark.parametrize(("client", "extra", "tokens"), [
    ("messages", {"thinking": {"type": "enabled", "budget_tokens": 2000}}, 2000),
    ("gemini", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 3000}}}, 3000),
    ("responses", {"reasoning": {"effort": "medium"}}, 4096),
    ("chat", {"reasoning_effort": "high", "max_tokens": 900}, 900),
    ("messages", {"thinking": {"type": "disabled"}}, 0),
])  # fmt: skip
def test_a_budget_reaches_the_engines_that_take_one_in_their_field(engine, client, extra, tokens):
    upstream, url, kind = engine
    assert ask(url, client, **extra).status_code == 200
    body = upstream.requests[-1]
    fields = {"vllm": "thinking_token_budget", "llamacpp": "reasoning_budget_tokens"}
    sent = {key: body[key] for key in ("thinking_token_budget", "reasoning_budget_tokens") if key in body}
    assert sent == ({fields[kind]: tokens} if kind in fields else {})


def test_no_effort_asked_sends_neither_level_nor_budget(engine):
    upstream, url, _ = engine
    assert ask(url, "chat").status_code == 200
    assert not {"reasoning_effort", "chat_template_kwargs", "thinking_token_budget",
                "reasoning_budget_tokens"} & set(upstream.requests[-1])  # fmt: skip


def test_configured_levels_per_model_and_budget_field():
    upstream = ScriptedUpstream(("a", "b"), "vllm")
    upstream.responder = strict(("none", "low", "medium", "high", "xhigh", "max"))
    with serve(upstream.app) as engine_url:
        config = UpstreamConfig(base_url=f"{engine_url}/v1", kind="vllm", thinking_budget_param="none",
                                reasoning_efforts={"a": ["none", "low", "high", "max"]})  # fmt: skip
        with serve(create_app(Settings(upstreams=[config], probe=False))) as url:
            for model, effort, sent in [("a", "max", "max"), ("a", "medium", "low"), ("a", "none", "none"),
                                        ("a", "xhigh", "high"), ("b", "max", "high"), ("b", "none", "low")]:  # fmt: skip
                body = {"model": model, "messages": [{"role": "user", "content": "x"}], "reasoning_effort": effort}
                assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code == 200
                assert upstream.requests[-1]["reasoning_effort"] == sent, (model, effort)
                assert "thinking_token_budget" not in upstream.requests[-1]


def test_nearest_level_and_budget():
    assert [accepted(level, LEVELS) for level in ("none", "minimal", "low", "xhigh", "max")] == [
        "low", "low", "low", "high", "high"]  # fmt: skip
    assert accepted("xhigh", ("low", "high", "max")) == "high", "the lower on a tie"
    assert accepted("none", ("none", "high")) == "none" and accepted("odd", LEVELS) == "odd"
    assert accepted("minimal", ("none", "low", "high")) == "low", "thinking asked for is never turned off"
    assert budget("low", None, None) == 1024 and budget("max", None, 8000) == 8000
    assert budget("low", 5000, None) == 5000 and budget(None, None, 100) is None


def test_templates_get_a_level_they_accept():
    request = GenerationRequest("m", [Message("user", [TextPart("x")])], reasoning_effort="max")
    assert template_options(request) == {"enable_thinking": True, "reasoning_effort": "high"}
    request.reasoning_effort = "none"
    assert template_options(request) == {"enable_thinking": False, "reasoning_effort": "low"}


def test_a_thinking_budget_counts_inside_the_block_the_model_opens():
    thinking = ThinkingBudget("<think>", "</think>", 2)
    for text in ("Hi", "<th", "ink>", "a"):
        thinking.feed(text)
        assert not thinking.due()
    thinking.feed("b")
    assert thinking.inside and thinking.due(), "two tokens inside: the closer is due"
    closed = ThinkingBudget("<think>", "</think>", 3, inside=True)
    for text in ("a", "</", "think>"):
        closed.feed(text)
    assert closed.over and not closed.due(), "the model closed it itself"


def test_a_template_that_refuses_levels_gets_one_it_lets_through():
    """Hunyuan's template raises on any level but `high`, `low` and `no_think`; gpt-oss's takes any."""
    templates = Path(__file__).parent / "data/formats/templates"
    hunyuan = ChatTemplate((templates / "tencent-Hy3.jinja").read_text())
    assert hunyuan.efforts == ("low", "high")
    request = GenerationRequest("m", [Message("user", [TextPart("x")])], reasoning_effort="medium")
    assert "reasoning_effort:low" in hunyuan.render_request(request)
    for effort in ("max", "xhigh", "minimal", "none"):
        request.reasoning_effort = effort
        hunyuan.render_request(request)
    assert ChatTemplate((templates / "openai-gpt-oss-120b.jinja").read_text()).efforts == ("low", "medium", "high")


def test_an_engine_that_refuses_the_budget_gets_none_from_then_on():
    """vLLM started without a reasoning parser refuses `thinking_token_budget`: the request is sent
    again without it, and so is every later one for the model."""
    upstream = ScriptedUpstream(("m",), "vllm")

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if "thinking_token_budget" in body:
            message = "thinking_token_budget is set but reasoning_config is not configured; start with --reasoning-parser"
            return {"status": 400, "error_body": json.dumps({"error": {"message": message, "code": 400}})}
        return text_exchange("ok")

    upstream.responder = answer
    with serve(upstream.app) as engine_url:
        settings = Settings(upstreams=[UpstreamConfig(base_url=f"{engine_url}/v1", kind="vllm")], probe=False)
        with serve(create_app(settings)) as url:
            for _ in range(2):
                reply = ask(url, "responses", "high")
                assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text
    sent = [("thinking_token_budget" in body, body["reasoning_effort"]) for body in upstream.requests]
    assert sent == [(True, "high"), (False, "high"), (False, "high")]
