"""llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`, a real engine
that is not ours) on loopback, for the tests' upstreams.

Run as a script, it is that server with the one change ResponseKit's in-process engine makes
too: no AMX weight repacking on CPUs where llama.cpp's AMX kernel crashes on Q4_K models
(`llama_sequence.avoid_amx_repacking`).
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


@contextmanager
def llama_cpp_server(model: Path, alias: str, directory: Path, *options: str) -> Iterator[str]:
    """The server on a free port, serving `model` as `alias`; yields its /v1 URL."""
    from .harness import free_port

    port = free_port()
    log = (directory / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, __file__, "--model", str(model), "--model_alias", alias, "--host", "127.0.0.1",
         "--port", str(port), *options],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError((directory / "server.log").read_text())
        time.sleep(0.1)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


if __name__ == "__main__":
    from responsekit.backends.llama_sequence import avoid_amx_repacking

    avoid_amx_repacking()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
