"""Which backend serves which model: configured or probed engines, in-process models,
aliases, a default model. Upstreams that serve the same model (or share a `pool`) serve it
as a pool (`pool.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx

from ..canonical.errors import APIError
from ..config import LocalModel, Settings, UpstreamConfig
from ..operations.logs import note_model
from ..operations.record import Recorder
from ..tls import client_context
from . import Backend, default_model
from .chat_upstream import ChatUpstream
from .completions import CompletionsUpstream
from .fairness import FairGate
from .llama_cpp import LlamaCppBackend
from .pool import Member, Pool

log = logging.getLogger(__name__)

PROBE_TARGETS: tuple[tuple[str, str], ...] = (
    ("llamacpp", "http://127.0.0.1:8080/v1"),
    ("ollama", "http://127.0.0.1:11434/v1"),
    ("vllm", "http://127.0.0.1:8000/v1"),
    ("sglang", "http://127.0.0.1:30000/v1"),
    ("lmstudio", "http://127.0.0.1:1234/v1"),
)
REFRESH_INTERVAL = 10.0
"""Seconds between model-list refreshes triggered by requests for unknown models."""
PROBE_INTERVAL = 2.0
"""Seconds between probes (`GET /models`) of the pool members that failed, until they answer."""
DEFAULT_MODEL_CONTEXT = 8192
"""The embedded model's context per sequence (Gemma 3 270M reads 32k; this keeps memory small)."""
DEFAULT_MODEL_MAX_OUTPUT = 256
"""The embedded model's longest answer when a request sets none: a base model rarely ends its
turn, and filling the context took ~7 minutes on 2 cores for a newcomer's first request."""
INSTEAD = (
    "To serve a real model instead, start an engine on its usual port (llama.cpp, Ollama, vLLM, SGLang, "
    "LM Studio) or pass --upstream URL, or run a GGUF in-process with --model FILE or --hf-repo REPO "
    "--hf-file FILE; --no-default-model turns this fallback off."
)


def make_upstream(config: UpstreamConfig, recorder: Recorder | None = None) -> ChatUpstream:
    """The backend for an upstream: chat, or raw completions (`api = "completions"`)."""
    if config.api == "completions":
        return CompletionsUpstream(config, recorder)
    return ChatUpstream(config, recorder)


class ModelRouter:
    def __init__(self, settings: Settings, recorder: Recorder | None = None) -> None:
        self._recorder = recorder
        self.upstreams = [make_upstream(config, recorder) for config in settings.upstreams]
        self.engines = [LlamaCppBackend(model) for model in settings.models]
        self.aliases = dict(settings.aliases)
        self.default_model = settings.default_model
        self._describes_images = settings.vision_model is not None
        self.probing = settings.probe and not settings.upstreams and not settings.models
        self._fallback = settings.default_model_fallback and not settings.upstreams and not settings.models
        self._data_dir = settings.data_dir
        self.default_model_status: dict[str, Any] | None = None
        """Why the embedded default model is served, or why it could not be (`/health`)."""
        self.balance = settings.balance
        self._models: dict[str, Backend] = {}
        self._reachable: dict[str, bool] = {}
        self._members: dict[int, Member] = {}
        """Each pooled upstream's state, by the upstream's id (shared by the pools of its models)."""
        self._pools: dict[tuple[str, str], Pool] = {}
        """Pools by (pool name, model)."""
        self._gates: dict[tuple[str, ...], FairGate] = {}
        self._gate_of: dict[Backend, FairGate | None] = {}
        self._keep_place_seconds = settings.keep_place_seconds
        self._prober: asyncio.Task[None] | None = None
        self._refreshed_at = float("-inf")
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await asyncio.gather(*(engine.start() for engine in self.engines))
        await self.refresh()
        self._prober = asyncio.create_task(self._probe_members())
        if not self.upstreams and not self.engines:
            where = ", ".join(url for _, url in PROBE_TARGETS) if self.probing else "probing is off"
            if self._fallback:
                await self._start_default_model(where)
            else:
                log.warning(
                    "no upstream engine found (%s); starting anyway. Start one there or pass --upstream URL.", where
                )

    async def _start_default_model(self, where: str) -> None:
        """Serve the embedded Gemma 3 270M in-process, so that a fresh install answers."""
        reason = f"no engine is configured and none was found ({where})"
        missing = default_model.available()
        if missing is not None:
            self.default_model_status = {"model": None, "reason": reason, "error": f"the default model cannot run: {missing}",
                                         "instead": INSTEAD}  # fmt: skip
            log.warning("%s, and %s. %s", reason, self.default_model_status["error"], INSTEAD)
            return
        path = await asyncio.to_thread(default_model.model_file, self._data_dir / "models")
        engine = LlamaCppBackend(LocalModel(name=default_model.DEFAULT_MODEL_NAME, path=path, context=DEFAULT_MODEL_CONTEXT,
                                            max_output_tokens=DEFAULT_MODEL_MAX_OUTPUT))
        self.default_model_status = {"model": engine.model, "reason": reason, "note": default_model.NOTE, "instead": INSTEAD}
        log.warning("%s: serving the embedded default model %s in-process. %s %s", reason, engine.model,
                    default_model.NOTE, INSTEAD)  # fmt: skip
        await engine.start()
        self.engines.append(engine)
        await self.refresh()

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        await asyncio.gather(*(backend.aclose() for backend in [*self.upstreams, *self.engines]))

    async def refresh(self) -> None:
        """Probe (when no upstream is configured) and reload every upstream's model list."""
        async with self._lock:
            self._refreshed_at = time.monotonic()
            if self.probing:
                await self._probe()
            models: dict[str, Backend] = {engine.config.name: engine for engine in self.engines if engine.loaded}
            listed = await asyncio.gather(*(self._list(upstream) for upstream in self.upstreams))
            serving: dict[str, list[ChatUpstream]] = {}
            for upstream, names in zip(self.upstreams, self._pooled_names(listed)):
                for name in names:
                    serving.setdefault(name, []).append(upstream)
            for name, upstreams in serving.items():
                models.setdefault(name, self._backend(name, upstreams))
            self._models = models

    def _pooled_names(self, listed: list[list[str]]) -> list[list[str]]:
        """Each upstream's models; one of a named pool that listed none (it is down) is taken to
        serve what the rest of its pool serves, so that it is probed and rejoins."""
        pools: dict[str, list[str]] = {}
        for upstream, names in zip(self.upstreams, listed):
            if upstream.config.pool is not None:
                pools.setdefault(upstream.config.pool, []).extend(names)
        return [
            names or list(dict.fromkeys(pools[upstream.config.pool])) if upstream.config.pool else names
            for upstream, names in zip(self.upstreams, listed)
        ]

    def _backend(self, model: str, upstreams: list[ChatUpstream]) -> Backend:
        """The backend of a model: its first upstream, or the pool that upstream belongs to
        (its named pool, else every other upstream of the model outside a named pool)."""
        group = upstreams[0].config.pool
        chosen = [upstream for upstream in upstreams if upstream.config.pool == group]
        if len(chosen) == 1:
            return chosen[0]
        key = (group or model, model)
        pool = self._pools.get(key)
        if pool is None or [member.upstream for member in pool.members] != chosen:
            members = [self._member(upstream) for upstream in chosen]
            pool = self._pools[key] = Pool(group or model, members, self.balance)
        for member in pool.members:
            if not self._reachable.get(member.name, True) and not member.failures:
                member.failed("it did not list its models")
        return pool

    def _member(self, upstream: ChatUpstream) -> Member:
        member = self._members.get(id(upstream))
        if member is None:
            member = self._members[id(upstream)] = Member(upstream)
        return member

    async def _probe_members(self) -> None:
        """Ask each member that failed for its `/models` until it answers: then it takes requests again."""
        while True:
            await asyncio.sleep(PROBE_INTERVAL)
            failing = [member for member in self._members.values() if member.failures]
            results = await asyncio.gather(
                *(member.upstream.list_models() for member in failing), return_exceptions=True
            )
            for member, result in zip(failing, results):
                self._reachable[member.name] = not isinstance(result, BaseException)
                if isinstance(result, BaseException):
                    member.failed(f"probe: {result!r}")
                else:
                    member.answered()

    async def _list(self, upstream: ChatUpstream) -> list[str]:
        """The models an upstream serves, their context windows learnt on the way."""
        try:
            names = await upstream.list_models()
            self._reachable[upstream.name] = True
        except (httpx.HTTPError, ValueError) as exc:
            self._reachable[upstream.name] = False
            log.warning("upstream %s (%s) did not list its models: %r", upstream.name, upstream.config.base_url, exc)
            return upstream.config.models
        served = upstream.config.models or names
        await upstream.learn_windows(served)
        return served

    async def _probe(self) -> None:
        known = {upstream.config.base_url for upstream in self.upstreams}

        async def answers(url: str) -> bool:
            try:
                async with httpx.AsyncClient(timeout=1.0, verify=client_context()) as client:
                    return (await client.get(f"{url}/models")).status_code == 200
            except httpx.HTTPError:
                return False

        candidates = [(kind, url) for kind, url in PROBE_TARGETS if url not in known]
        found = await asyncio.gather(*(answers(url) for _, url in candidates))
        for (kind, url), ok in zip(candidates, found):
            if ok:
                log.info("found a %s engine at %s", kind, url)
                self.upstreams.append(make_upstream(UpstreamConfig(name=kind, base_url=url, kind=kind), self._recorder))

    async def resolve(self, model: str) -> tuple[Backend, str]:
        """The backend and its own model name for what a client asked for."""
        note_model(model)
        found = self._lookup(model)
        if found is None and time.monotonic() - self._refreshed_at > REFRESH_INTERVAL:
            await self.refresh()
            found = self._lookup(model)
        if found is None:
            known = ", ".join(sorted(self._models)) or "none (no upstream engine is reachable)"
            raise APIError(
                404,
                f"The model `{model}` does not exist or you do not have access to it. "
                f"Models served: {known}. Configure an alias or a default model to map other names.",
                type="invalid_request_error",
                code="model_not_found",
                param="model",
            )
        return found

    def _lookup(self, model: str) -> tuple[Backend, str] | None:
        for name in (model, self.default_model):
            if name is None:
                continue
            target = self.aliases.get(name, name)
            upstream = self._models.get(target)
            if upstream is not None:
                return upstream, target
        return None

    def images(self, model: str) -> dict[str, Any] | None:
        """Whether the model a client names reads images, and who said (None: not served)."""
        found = self._lookup(model)
        if found is None:
            return None
        backend, target = found
        return {"reads_images": backend.reads_images(target), "source": backend.images_source(target)}

    def gate(self, backend: Backend) -> FairGate | None:
        """The fair queue in front of this upstream or pool (None: it has no `max_concurrency`;
        a pool has one when all its members do), looked up once per backend: a request asks."""
        try:
            return self._gate_of[backend]
        except KeyError:
            gate = self._gate_of[backend] = self._make_gate(backend)
            return gate

    def _make_gate(self, backend: Backend) -> FairGate | None:
        if isinstance(backend, Pool):
            upstreams = [member.upstream for member in backend.members]
        elif isinstance(backend, (ChatUpstream, CompletionsUpstream)):
            upstreams = [backend]
        else:
            return None
        if not upstreams or any(u.config.max_concurrency is None for u in upstreams):
            return None
        name = backend.name if isinstance(backend, Pool) else backend.config.name
        key = tuple(u.config.name for u in upstreams)
        gate = self._gates.get(key)
        if gate is None:
            if isinstance(backend, Pool):
                members = backend.members

                def capacity() -> int:
                    now = time.monotonic()
                    live = [m for m in members if not m.cooling(now)] or members
                    return sum(m.upstream.config.max_concurrency or 0 for m in live)
            else:
                bound = upstreams[0].config.max_concurrency or 0

                def capacity() -> int:
                    return bound

            gate = self._gates[key] = FairGate(name, capacity, self._keep_place_seconds)
        return gate

    def serves(self, model: str) -> bool:
        """Whether `model` is a name an engine serves (what `resolve` returns)."""
        return model in self._models

    def list_models(self) -> list[dict[str, Any]]:
        """`/v1/models` entries: every upstream model, then every alias that resolves."""
        entries = [self._entry(name, upstream, name) for name, upstream in self._models.items()]
        for alias, target in self.aliases.items():
            upstream = self._models.get(target)
            if upstream is not None and alias not in self._models:
                entries.append(self._entry(alias, upstream, target))
        return entries

    async def entry(self, model: str) -> dict[str, Any]:
        """The `/v1/models` entry of any name a client may ask for (404 when nothing serves it)."""
        backend, target = await self.resolve(model)
        return self._entry(model, backend, target)

    def _entry(self, name: str, backend: Backend, target: str) -> dict[str, Any]:
        """A `/v1/models` entry in OpenAI's shape. Extension fields: the context window of the model
        `name` stands for and its largest answer (the whole window: a larger maximum is clamped to
        what the prompt leaves), null when unknown; its `input_modalities`, with images unless it
        reads text only and no `vision_model` describes them for it (when nobody said, an image is
        sent and a refusal teaches it), so that an agent told them sends images only where they
        reach the model."""
        window = backend.context_window(target)
        images = self._describes_images or backend.reads_images(target) is not False
        return {"id": name, "object": "model", "created": 0, "owned_by": backend.name, "context_window": window,
                "max_output_tokens": window, "input_modalities": ["text", "image"] if images else ["text"]}  # fmt: skip

    def _member_state(self, upstream: ChatUpstream) -> dict[str, Any]:
        """A pool member's state for `/health` (nothing for an upstream outside pools)."""
        member = self._members.get(id(upstream))
        return {} if member is None else member.state()

    def _failing(self, upstream: ChatUpstream) -> bool:
        """A pool member that failed and has not answered since: not reachable now, whatever its
        last listing said."""
        member = self._members.get(id(upstream))
        return member is not None and member.failures > 0

    def members(self) -> list[Member]:
        """Every pooled upstream (for the metrics)."""
        return list(self._members.values())

    def health(self) -> dict[str, Any]:
        upstreams = [
            {
                "name": upstream.name,
                "base_url": upstream.config.base_url,
                "kind": upstream.kind,
                "reachable": self._reachable.get(upstream.name, False) and not self._failing(upstream),
                "models": (models := [name for name, owner in self._models.items() if _serves(owner, upstream)]),
                "images": {name: {"reads_images": upstream.reads_images(name), "source": upstream.images_source(name)}
                           for name in models},
                **self._member_state(upstream),
            }
            for upstream in self.upstreams
        ]
        upstreams += [
            {
                "name": engine.name,
                "base_url": str(engine.config.path or f"hf://{engine.config.hf_repo}/{engine.config.hf_file}"),
                "kind": engine.kind,
                "reachable": engine.loaded,
                "models": [engine.config.name],
                "images": {engine.config.name: {"reads_images": engine.reads_images(engine.model),
                                                "source": engine.images_source(engine.model)}},
                "chat_template": engine.template_origin,
            }
            for engine in self.engines
        ]
        healthy = any(entry["reachable"] for entry in upstreams)
        body: dict[str, Any] = {"status": "ok" if healthy else "no_upstream", "upstreams": upstreams}
        pools = [
            {"name": name, "model": model, "balance": pool.balance, "members": [m.name for m in pool.members]}
            for (name, model), pool in self._pools.items()
            if self._models.get(model) is pool
        ]
        if pools:
            body["pools"] = pools
        if self.default_model_status is not None:
            body["default_model"] = self.default_model_status
        if not healthy:
            body["message"] = (
                "No upstream engine is reachable. Start one (llama.cpp, Ollama, vLLM, SGLang, LM Studio) "
                "on its usual port or pass --upstream URL."
            )
        return body


def _serves(backend: Backend, upstream: ChatUpstream) -> bool:
    """Whether `backend` is `upstream` or a pool it belongs to."""
    if isinstance(backend, Pool):
        return any(member.upstream is upstream for member in backend.members)
    return backend is upstream
