"""Every model's context window: read from its engine's own API (vLLM and SGLang `/v1/models`,
llama.cpp's `/props`, Ollama's `/api/ps` and `/api/show`, LM Studio's `/api/v1/models` or
`/api/v0/models`), set over by configuration, shown in both shapes of `/v1/models`, in the Gemini
models API and on the front page; and, with the window known, an output maximum larger than what it
leaves clamped, so that a vLLM-style engine that refuses prompt + `max_tokens` beyond its window
answers Claude Code's 32,000.

Each engine here is a real HTTP server on loopback answering in its kind's shapes, as its docs give
them (cited in `responsekit/backends/windows.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic.types
import httpx
import openai.types
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response as HTTPResponse
from starlette.routing import Route

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import ScriptedUpstream, serve, text_exchange
from .test_gemini import check_model

ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "test"}


@dataclass
class Engine:
    """An engine of one kind: what it lists on `/v1/models` and what its own API answers."""

    kind: str
    """The `kind` ResponseKit is configured with (`auto`: recognised from the listing, or probed)."""
    listing: list[dict[str, Any]]
    routes: list[Route] = field(default_factory=list)
    windows: dict[str, int | None] = field(default_factory=dict)
    """The windows ResponseKit should find."""
    asked: list[str] = field(default_factory=list)
    """The engine's own routes asked, with their query strings."""

    def app(self) -> Starlette:
        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": self.listing})

        async def noted(request: Request, answer: Callable[[Request], Any]) -> HTTPResponse:
            self.asked.append(f"{request.url.path}?{request.url.query}" if request.url.query else request.url.path)
            found = await answer(request)
            return found if isinstance(found, HTTPResponse) else JSONResponse(found)

        routes = [Route("/v1/models", models)]
        for route in self.routes:
            routes.append(Route(route.path, _bound(noted, route.endpoint), methods=list(route.methods or ["GET"])))
        return Starlette(routes=routes)


def _bound(noted: Callable[..., Any], endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def call(request: Request) -> HTTPResponse:
        return await noted(request, endpoint)

    return call


def listed(*names: str, owned_by: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": name, "object": "model", "created": 1, "owned_by": owned_by, **extra} for name in names]


def answers(body: Any, status: int = 200) -> Callable[[Request], Any]:
    async def answer(request: Request) -> Any:
        return JSONResponse(body, status_code=status)

    return answer


def vllm() -> Engine:
    """vLLM's `ModelCard`s, `max_model_len` on each."""
    listing = listed("Qwen/Qwen3-8B", owned_by="vllm", root="Qwen/Qwen3-8B", parent=None, max_model_len=32768,
                     permission=[])  # fmt: skip
    return Engine("auto", listing, windows={"Qwen/Qwen3-8B": 32768})


def sglang() -> Engine:
    return Engine("auto", listed("qwen3", owned_by="sglang", root="Qwen/Qwen3-8B", parent=None, max_model_len=65536),
                  windows={"qwen3": 65536})  # fmt: skip


LLAMA_PROPS = {
    "default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": 4096, "speculative": False, "is_processing": False,
                                    "params": {"n_predict": -1, "temperature": 0.8}},
    "total_slots": 1, "model_path": "/models/Qwen3-4B-Q4_K_M.gguf", "chat_template": "...", "modalities": {"vision": False},
    "build_info": "b6000-abcdef0", "is_sleeping": False,
}  # fmt: skip
"""llama.cpp's server's `/props`, trimmed."""


def llamacpp() -> Engine:
    return Engine("auto", listed("Qwen3-4B-Q4_K_M.gguf", owned_by="llamacpp"),
                  [Route("/props", answers(LLAMA_PROPS))], windows={"Qwen3-4B-Q4_K_M.gguf": 4096})  # fmt: skip


OLLAMA_SHOWN = {
    "qwen3:8b": {"parameters": 'temperature 0.6\ntop_k 20\nstop "<|im_end|>"', "capabilities": ["completion", "tools"],
                 "details": {"format": "gguf", "family": "qwen3"},
                 "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960, "qwen3.block_count": 36}},
    "custom:latest": {"parameters": 'num_ctx                        16384\nstop                           "<|eot_id|>"',
                      "model_info": {"general.architecture": "llama", "llama.context_length": 131072}},
}  # fmt: skip
"""Ollama's `/api/show` for two models it has not loaded: one with the model's own window only, one
whose Modelfile sets a smaller `num_ctx`."""


async def ollama_show(request: Request) -> Any:
    shown = OLLAMA_SHOWN.get((await request.json()).get("model"))
    return JSONResponse({"error": "model not found"}, status_code=404) if shown is None else shown


def ollama(kind: str = "ollama") -> Engine:
    """Ollama with one model loaded (`/api/ps`) and two not; `auto`: recognised by probing in turn."""
    running = {"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 3_000_000_000,
                           "digest": "a80c4f17acd5", "details": {"format": "gguf", "family": "llama"},
                           "expires_at": "2026-01-01T00:05:00Z", "size_vram": 3_000_000_000, "context_length": 8192}]}  # fmt: skip
    return Engine(kind, listed("llama3.2:latest", "qwen3:8b", "custom:latest", owned_by="library"),
                  [Route("/api/ps", answers(running)), Route("/api/show", ollama_show, methods=["POST"])],
                  windows={"llama3.2:latest": 8192, "qwen3:8b": 40960, "custom:latest": 16384})  # fmt: skip


def lmstudio() -> Engine:
    """LM Studio 0.4: one model loaded with a 4096 context, one not (its maximum)."""
    models = {"models": [
        {"type": "llm", "publisher": "google", "key": "google/gemma-4-26b-a4b", "display_name": "Gemma 4 26B A4B",
         "loaded_instances": [{"id": "google/gemma-4-26b-a4b", "config": {"context_length": 4096, "parallel": 4}}],
         "max_context_length": 262144, "format": "gguf"},
        {"type": "llm", "publisher": "deepseek", "key": "deepseek-r1", "display_name": "DeepSeek R1",
         "loaded_instances": [], "max_context_length": 131072, "format": "gguf"},
    ]}  # fmt: skip
    return Engine("lmstudio", listed("google/gemma-4-26b-a4b", "deepseek-r1", owned_by="organization_owner"),
                  [Route("/api/v1/models", answers(models))],
                  windows={"google/gemma-4-26b-a4b": 4096, "deepseek-r1": 131072})  # fmt: skip


def lmstudio_v0() -> Engine:
    """LM Studio before 0.4: `/api/v0/models` only."""
    data = {"object": "list", "data": [
        {"id": "qwen2-vl-7b-instruct", "object": "model", "type": "vlm", "arch": "qwen2_vl", "state": "not-loaded",
         "max_context_length": 32768},
        {"id": "meta-llama-3.1-8b-instruct", "object": "model", "type": "llm", "arch": "llama", "state": "loaded",
         "max_context_length": 131072, "loaded_context_length": 8192},
    ]}  # fmt: skip
    return Engine("lmstudio", listed("qwen2-vl-7b-instruct", "meta-llama-3.1-8b-instruct", owned_by="organization_owner"),
                  [Route("/api/v0/models", answers(data))],
                  windows={"qwen2-vl-7b-instruct": 32768, "meta-llama-3.1-8b-instruct": 8192})  # fmt: skip


def misbehaving() -> Engine:
    """A llama.cpp-like engine whose `/props` answers another shape, one whose `/api/ps` fails: unknown."""
    return Engine("auto", listed("odd", owned_by="llamacpp"), [Route("/props", answers([4096]))], windows={"odd": None})


def failing() -> Engine:
    return Engine("ollama", listed("down:latest", owned_by="library"), [Route("/api/ps", answers({"error": "x"}, 500))],
                  windows={"down:latest": None})  # fmt: skip


def unknown_kind() -> Engine:
    """An engine of no known kind that answers none of the kinds' APIs (404 everywhere): unknown."""
    return Engine("auto", listed("mystery", owned_by="somebody"), windows={"mystery": None})


ENGINES = {"vllm": vllm, "sglang": sglang, "llamacpp": llamacpp, "ollama": ollama, "ollama-probed": lambda: ollama("auto"),
           "lmstudio": lmstudio, "lmstudio-v0": lmstudio_v0, "misbehaving": misbehaving, "failing": failing,
           "unknown": unknown_kind}  # fmt: skip


@pytest.fixture
def running(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, str]]:
    engine: Engine = ENGINES[request.param]()
    with serve(engine.app()) as url:
        yield engine, f"{url}/v1"


def gateway(url: str, kind: str, database_url: str, **options: Any) -> Settings:
    return Settings(upstreams=[UpstreamConfig(name="engine", base_url=url, kind=kind, **options)],  # type: ignore[arg-type]
                    probe=False, database_url=database_url)  # fmt: skip


def openai_models(url: str) -> dict[str, openai.types.Model]:
    data = httpx.get(f"{url}/v1/models").json()["data"]
    return {model.id: model for model in (openai.types.Model.model_validate(entry, strict=True) for entry in data)}


def anthropic_models(url: str) -> dict[str, anthropic.types.ModelInfo]:
    data = httpx.get(f"{url}/v1/models", headers=ANTHROPIC).json()["data"]
    return {model.id: model for model in (anthropic.types.ModelInfo.model_validate(entry) for entry in data)}


@pytest.mark.parametrize("running", list(ENGINES), indirect=True)
def test_each_engine_kind_tells_its_windows(running, database_url):
    engine, engine_url = running
    with serve(create_app(gateway(engine_url, engine.kind, database_url))) as url:
        shown = openai_models(url)
        assert {name: model.model_extra["context_window"] for name, model in shown.items()} == engine.windows
        assert {name: model.model_extra["max_output_tokens"] for name, model in shown.items()} == engine.windows
        infos = anthropic_models(url)
        assert {name: info.max_input_tokens for name, info in infos.items()} == engine.windows
        assert {name: info.max_tokens for name, info in infos.items()} == engine.windows
        assert httpx.get(f"{url}/health").json()["status"] == "ok", "a window not told breaks nothing"
    if engine.kind == "auto" and engine.listing[0]["owned_by"] == "llamacpp":
        # Asked per model, without making a llama.cpp router load one it has not.
        (model,) = engine.windows
        assert f"/props?model={model}&autoload=false" in engine.asked


@pytest.mark.parametrize("running", ["ollama-probed"], indirect=True)
def test_an_engine_of_unknown_kind_is_asked_in_turn(running, database_url):
    engine, engine_url = running
    with serve(create_app(gateway(engine_url, "auto", database_url))):
        pass
    # llama.cpp's /props first (not here: a 404), then Ollama's API, which answers; LM Studio's is not asked.
    assert engine.asked[0] == "/api/ps" and not any(asked.startswith("/api/v") for asked in engine.asked)


@pytest.mark.parametrize("running", ["vllm", "llamacpp"], indirect=True)
def test_configuration_sets_the_window_over_the_engine(running, database_url):
    engine, engine_url = running
    (name,) = engine.windows
    for configured, expected in ((2048, 2048), ({name: 1024}, 1024), ({"another": 1024}, engine.windows[name])):
        engine.asked.clear()
        with serve(create_app(gateway(engine_url, engine.kind, database_url, context_window=configured))) as url:
            assert openai_models(url)[name].model_extra["context_window"] == expected
            assert anthropic_models(url)[name].max_input_tokens == expected
        if expected != engine.windows[name]:
            assert not [asked for asked in engine.asked if "autoload" in asked], "a configured window is not asked"


def test_a_pool_shows_its_members_smallest_window(database_url):
    """A request may go to either member: the window shown is the one both have."""
    big, small = (Engine("auto", listed("qwen3", owned_by="vllm", max_model_len=window)) for window in (32768, 8192))
    with serve(big.app()) as one, serve(small.app()) as two:
        settings = Settings(upstreams=[UpstreamConfig(base_url=f"{one}/v1"), UpstreamConfig(base_url=f"{two}/v1")],
                            probe=False, database_url=database_url)  # fmt: skip
        with serve(create_app(settings)) as url:
            assert openai_models(url)["qwen3"].model_extra["context_window"] == 8192
            assert httpx.get(f"{url}/health").json()["pools"][0]["members"] == [one.removeprefix("http://"),
                                                                                two.removeprefix("http://")]  # fmt: skip


@pytest.mark.parametrize("running", ["ollama"], indirect=True)
def test_the_gemini_models_api_and_the_front_page_show_the_windows(running, database_url):
    engine, engine_url = running
    settings = gateway(engine_url, engine.kind, database_url)
    settings.aliases = {"small": "custom:latest"}
    with serve(create_app(settings)) as url:
        models = httpx.get(f"{url}/v1beta/models").json()["models"]
        limits = {model.name: (model.input_token_limit, model.output_token_limit) for model in map(check_model, models)}
        assert limits == {f"models/{name}": (window, window) for name, window in {**engine.windows, "small": 16384}.items()}
        alias = check_model(httpx.get(f"{url}/v1beta/models/small").json())
        assert alias.input_token_limit == 16384
        facts = httpx.get(f"{url}/").json()
        assert {model["id"]: model["context_window"] for model in facts["models"]} == {**engine.windows, "small": 16384}
        html = httpx.get(f"{url}/", headers={"accept": "text/html"}).text
        assert "40960 tokens" in html and "16384 tokens" in html


class VllmLike(ScriptedUpstream):
    """A scripted engine that lists `max_model_len` and refuses, as vLLM does, a request whose prompt
    and `max_tokens` together exceed it (prompt tokens counted as its `/tokenize` counts them)."""

    def __init__(self, window: int) -> None:
        super().__init__(("qwen3-coder",), owned_by="vllm")
        self.window = window
        self.counted: list[int] = []
        """What each `/tokenize` answered."""

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        return sum(len(str(m.get("content") or "").split()) for m in body["messages"]) + 3 * len(body["messages"])

    async def _models(self, request: Request) -> JSONResponse:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": self.owned_by, "max_model_len": self.window}
                for name in self.models]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    async def _tokenize(self, request: Request) -> JSONResponse:
        answer = await super()._tokenize(request)
        self.counted.append(self.prompt_tokens(await request.json()))
        return answer

    async def _chat(self, request: Request) -> HTTPResponse:
        body = await request.json()
        prompt, wanted = self.prompt_tokens(body), body.get("max_tokens") or 0
        if prompt + wanted > self.window:
            self.requests.append(body)
            message = (f"'max_tokens' or 'max_completion_tokens' is too large: {wanted}. This model's maximum context "
                       f"length is {self.window} tokens and your request has {prompt} input tokens "
                       f"({wanted} > {self.window} - {prompt}).")  # fmt: skip
            error = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
            return JSONResponse(error, status_code=400)
        return await super()._chat(request)


@pytest.fixture
def vllm_like() -> Iterator[VllmLike]:
    engine = VllmLike(8192)
    with serve(engine.app) as url:
        engine.url = f"{url}/v1"  # type: ignore[attr-defined]
        yield engine


def test_the_engine_refuses_prompt_and_maximum_beyond_its_window(vllm_like):
    body = {"model": "qwen3-coder", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32000}
    refused = httpx.post(f"{vllm_like.url}/chat/completions", json=body)  # type: ignore[attr-defined]
    assert refused.status_code == 400 and "maximum context length is 8192" in refused.text


def test_an_output_maximum_beyond_the_window_is_clamped_on_every_api(vllm_like, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=vllm_like.url)], probe=False, database_url=database_url)  # type: ignore[attr-defined]
    prompt = "Summarize the plan in one line."
    asks = {
        "/v1/messages": {"model": "qwen3-coder", "max_tokens": 32000, "messages": [{"role": "user", "content": prompt}]},
        "/v1/responses": {"model": "qwen3-coder", "max_output_tokens": 32000, "input": prompt},
        "/v1/chat/completions": {"model": "qwen3-coder", "max_tokens": 32000, "messages": [{"role": "user", "content": prompt}]},
        "/v1beta/models/qwen3-coder:generateContent": {"contents": [{"role": "user", "parts": [{"text": prompt}]}],
                                                       "generationConfig": {"maxOutputTokens": 32000}},
    }  # fmt: skip
    with serve(create_app(settings)) as url:
        for route, body in asks.items():
            vllm_like.push(text_exchange("One line."))
            answer = httpx.post(f"{url}{route}", json=body, headers=ANTHROPIC if route == "/v1/messages" else {})
            assert answer.status_code == 200, (route, answer.text)
            sent = vllm_like.requests[-1]
            assert sent["max_tokens"] == 8192 - vllm_like.counted[-1] == 8192 - vllm_like.prompt_tokens(sent), route
        # Claude Code's own ask, streamed.
        vllm_like.push(text_exchange("Streamed."))
        with httpx.stream("POST", f"{url}/v1/messages", headers=ANTHROPIC,
                          json={**asks["/v1/messages"], "stream": True}) as streamed:  # fmt: skip
            assert streamed.status_code == 200 and "message_stop" in streamed.read().decode()
        assert vllm_like.requests[-1]["max_tokens"] < 8192
        # A maximum that fits whatever the prompt costs asks the engine for no count.
        counts = len(vllm_like.counted)
        vllm_like.push(text_exchange("Short."))
        small = {**asks["/v1/messages"], "max_tokens": 1000}
        assert httpx.post(f"{url}/v1/messages", json=small, headers=ANTHROPIC).status_code == 200
        assert vllm_like.requests[-1]["max_tokens"] == 1000 and len(vllm_like.counted) == counts
