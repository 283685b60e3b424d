"""Which backend serves which model: configured or probed engines, in-process models,
aliases, a default model."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from .. import default_model
from ..config import LocalModel, Settings, UpstreamConfig
from ..errors import APIError
from ..logs import note_model
from ..record import Recorder
from . import Backend
from .chat_upstream import ChatUpstream
from .completions import CompletionsUpstream
from .llama_cpp import LlamaCppBackend

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
        self.probing = settings.probe and not settings.upstreams and not settings.models
        self._fallback = settings.default_model_fallback and not settings.upstreams and not settings.models
        self._data_dir = settings.data_dir
        self.default_model_status: dict[str, Any] | None = None
        """Why the embedded default model is served, or why it could not be (`/health`)."""
        self._models: dict[str, Backend] = {}
        self._reachable: dict[str, bool] = {}
        self._refreshed_at = float("-inf")
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await asyncio.gather(*(engine.start() for engine in self.engines))
        await self.refresh()
        if not self.upstreams and not self.engines:
            where = ", ".join(url for _, url in PROBE_TARGETS) if self.probing else "probing is off"
            if self._fallback:
                await self._start_default_model(where)
            else:
                log.warning(
                    "no upstream engine found (%s); starting anyway. Start one there or pass --upstream URL.", where
                )

    async def _start_default_model(self, where: str) -> None:
        """Serve the embedded Gemma 3 270M in-process, so that a fresh install answers (issue 14)."""
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
        await asyncio.gather(*(backend.aclose() for backend in [*self.upstreams, *self.engines]))

    async def refresh(self) -> None:
        """Probe (when no upstream is configured) and reload every upstream's model list."""
        async with self._lock:
            self._refreshed_at = time.monotonic()
            if self.probing:
                await self._probe()
            models: dict[str, Backend] = {engine.config.name: engine for engine in self.engines if engine.loaded}
            listed = await asyncio.gather(*(self._list(upstream) for upstream in self.upstreams))
            for upstream, names in zip(self.upstreams, listed):
                for name in names:
                    models.setdefault(name, upstream)
            self._models = models

    async def _list(self, upstream: ChatUpstream) -> list[str]:
        try:
            names = await upstream.list_models()
            self._reachable[upstream.name] = True
        except (httpx.HTTPError, ValueError) as exc:
            self._reachable[upstream.name] = False
            log.warning("upstream %s (%s) did not list its models: %r", upstream.name, upstream.config.base_url, exc)
            names = []
        return upstream.config.models or names

    async def _probe(self) -> None:
        known = {upstream.config.base_url for upstream in self.upstreams}

        async def answers(url: str) -> bool:
            try:
                async with httpx.AsyncClient(timeout=1.0) as client:
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

    def serves(self, model: str) -> bool:
        """Whether `model` is a name an engine serves (what `resolve` returns)."""
        return model in self._models

    def list_models(self) -> list[dict[str, Any]]:
        """`/v1/models` entries: every upstream model, then every alias that resolves."""
        entries = [
            {"id": name, "object": "model", "created": 0, "owned_by": upstream.name}
            for name, upstream in self._models.items()
        ]
        for alias, target in self.aliases.items():
            upstream = self._models.get(target)
            if upstream is not None and alias not in self._models:
                entries.append({"id": alias, "object": "model", "created": 0, "owned_by": upstream.name})
        return entries

    def health(self) -> dict[str, Any]:
        upstreams = [
            {
                "name": upstream.name,
                "base_url": upstream.config.base_url,
                "kind": upstream.kind,
                "reachable": self._reachable.get(upstream.name, False),
                "models": [name for name, owner in self._models.items() if owner is upstream],
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
                "chat_template": engine.template_origin,
            }
            for engine in self.engines
        ]
        healthy = any(entry["reachable"] for entry in upstreams)
        body: dict[str, Any] = {"status": "ok" if healthy else "no_upstream", "upstreams": upstreams}
        if self.default_model_status is not None:
            body["default_model"] = self.default_model_status
        if not healthy:
            body["message"] = (
                "No upstream engine is reachable. Start one (llama.cpp, Ollama, vLLM, SGLang, LM Studio) "
                "on its usual port or pass --upstream URL."
            )
        return body
