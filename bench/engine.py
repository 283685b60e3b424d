"""Tokens per second of the in-process engine through `/v1/responses`, against a bare
llama-cpp-python generation loop on the same model and prompt.

Three models: two random-weight llama GGUFs written first, the test suite's tiny one (2
layers, 64 dims: generation costs almost nothing, so the table shows ResponseKit's own cost
per token) and a ~0.1B one in f16 (12 layers, 768 dims), which never end their turn, so
every run writes exactly the asked number of tokens; and the real Gemma 3 270M (Q4_K_M,
the embedded default model, from the `llama` extra's package), which may end its turn
before: each side's rate then counts the tokens it wrote (both stop at the end of turn).

* bare: `Llama.generate` (greedy) fed the rendered prompt's tokens, each token detokenized,
  with the same model parameters as ResponseKit's (no AMX repacking where it crashes).
* ResponseKit: `responsekit serve --model` in its own process; a streaming `/v1/responses`
  request (greedy), read with httpx until `response.completed`.

"decode tok/s" counts from the first token (first text delta) to the last, so prompt
processing and caches do not enter it; "end to end" counts from the request. Best of 3.
Run: `.venv/bin/python bench/engine.py [--tokens N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from machine import describe

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from responsekit.backends import default_model
from responsekit.backends.llama_sequence import avoid_amx_repacking
from responsekit.canonical.conversation import GenerationRequest, Message, TextPart
from responsekit.prompting.templates import from_gguf
from tests.tiny_gguf import write_tiny_gguf

PROMPT = "Write a long story about a lighthouse keeper and a storm."
REAL = "Gemma 3 270M (Q4_K_M, real)"
MODELS = {
    "tiny (2 layers, 64 dims)": {},
    "small (12 layers, 768 dims, f16)": {"embd": 768, "layers": 12, "ff": 2048, "heads": 12, "half": True},
    REAL: None,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bare(path: Path, prompt: str, tokens: int) -> tuple[float, float, int]:
    """(decode seconds, end-to-end seconds, tokens) of llama-cpp-python's own loop."""
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as native

    avoid_amx_repacking()
    llama = Llama(str(path), n_ctx=4096, verbose=False)
    add_bos = bool(llama._model.add_bos_token())
    prompt_tokens = llama.tokenize(prompt.encode(), add_bos=add_bos, special=True)
    best = (float("inf"), float("inf"), 0)
    for _ in range(3):
        llama.reset()
        started = time.perf_counter()
        first = 0.0
        count = 0
        for token in llama.generate(prompt_tokens, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, reset=True):
            if native.llama_vocab_is_eog(llama._model.vocab, token):
                break
            llama.detokenize([token])
            count += 1
            if count == 1:
                first = time.perf_counter()
            if count == tokens:
                break
        ended = time.perf_counter()
        best = min(best, (ended - first, ended - started, count))
    llama.close()
    return best


def served(path: Path, tokens: int) -> tuple[float, float, int]:
    """The same through `responsekit serve --model` and a streaming `/v1/responses`."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="rk-bench-")
    env = {**os.environ, "RESPONSEKIT_DATA_DIR": data}
    child = subprocess.Popen(
        [sys.executable, "-m", "responsekit", "serve", "--model", str(path), "--port", str(port), "--no-probe",
         "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/models", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError("responsekit serve did not start") from None
                time.sleep(0.2)
        body = {"model": path.stem, "input": PROMPT, "stream": True, "temperature": 0, "max_output_tokens": tokens,
                "store": False}  # fmt: skip
        best = (float("inf"), float("inf"), 0)
        with httpx.Client(timeout=600) as client:
            for _ in range(3):
                started = time.perf_counter()
                first = 0.0
                count = 0
                with client.stream("POST", f"{url}/responses", json=body) as answer:
                    for line in answer.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        if not first and '"response.output_text.delta"' in line:
                            first = time.perf_counter()
                        if '"response.incomplete"' in line or '"response.completed"' in line:
                            count = json.loads(line[6:])["response"]["usage"]["output_tokens"]
                ended = time.perf_counter()
                best = min(best, (ended - first, ended - started, count))
        return best
    finally:
        child.terminate()
        child.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=0, help="tokens per run (default: 2000 tiny, 256 small)")
    args = parser.parse_args()
    print(describe())
    print()
    print("| model | tokens | bare decode tok/s | ResponseKit decode tok/s | ratio | bare end to end tok/s "
          "| ResponseKit end to end tok/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as directory:
        for label, shape in MODELS.items():
            if shape is None:
                tokens = args.tokens or 256
                path = default_model.model_file(Path(directory))
            else:
                tokens = args.tokens or (2000 if not shape else 256)
                path = write_tiny_gguf(Path(directory) / f"{'small' if shape else 'tiny'}.gguf", **shape)  # type: ignore[arg-type]
            request = GenerationRequest(path.stem, [Message("user", [TextPart(PROMPT)])])
            prompt = from_gguf(path).render_request(request)
            bare_decode, bare_total, bare_count = bare(path, prompt, tokens)
            rk_decode, rk_total, rk_count = served(path, tokens)
            if shape is not None:
                assert bare_count == rk_count == tokens, (bare_count, rk_count)
            # Decode rates count the tokens after the first.
            b_dec, r_dec = (bare_count - 1) / bare_decode, (rk_count - 1) / rk_decode
            b_all, r_all = bare_count / bare_total, rk_count / rk_total
            counts = f"{tokens}" if bare_count == rk_count == tokens else f"{bare_count} / {rk_count}"
            print(f"| {label} | {counts} | {b_dec:,.0f} | {r_dec:,.0f} | {r_dec / b_dec:.2f} | {b_all:,.0f} "
                  f"| {r_all:,.0f} | {r_all / b_all:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
