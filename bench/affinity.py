"""What cache affinity buys an engine pool: time to first token of a conversation's later turns
when they go back to the engine that holds their prompt, against round robin.

Two llama-cpp-python servers (`tests/llama_server.py`, one thread each, a request at a time: the
next waits instead of interrupting it) run the real Gemma 3 270M model. Each keeps the KV cache
of the last prompt it read, so a prompt that extends it is read from where it differs (with its
RAM cache of several prompts, `--cache`, a server stopped mid-run here, its log ending in a state
save). ResponseKit renders the chat template (`api = "completions"`) and pools them.
Conversations of `--turns` turns start with a long document and add a long user turn each time;
several run at once, each starting a second after the last and pausing before each turn (a user
reading and typing) for a time of its own: none for the first, `--think` seconds more for each next
one. Conversations at one pace would take turns in lockstep, and round robin would then send each
to the same member turn after turn by chance.
Three kinds of client, each a run per balancing policy:

- `chained`: `previous_response_id` (stored responses), routed by the chain;
- `keyed`: the whole history replayed with `prompt_cache_key`;
- `stateless`: the whole history replayed, no key at all (Codex with `store: false`), routed by the
  longest prefix a member served.

Measured: the time from sending a turn to its first streamed text (turns 2 to N; the first turn
of a conversation has nothing cached anywhere), p50 and mean, per policy and kind.

Run: `.venv/bin/python bench/affinity.py` (`--help` for options); prints a Markdown section for
bench/RESULTS.md. It takes a few minutes: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from gateway import free_port, service
from machine import describe

from responsekit.backends.default_model import model_file

MODEL = "gemma-pool"
KINDS = ("chained", "keyed", "stateless")
POLICIES = ("affinity", "round_robin")
WORDS = ["harbor", "lantern", "quartz", "meadow", "falcon", "ember", "willow", "cobalt", "saffron", "granite", "orchard", "velvet", "thistle", "beacon", "marble", "juniper", "cinder", "lagoon", "prairie", "topaz"]  # fmt: skip


def passage(seed: int, words: int) -> str:
    """A deterministic filler text of `words` words (no two seeds share a prefix of any length)."""
    pick = random.Random(seed)
    return " ".join(pick.choice(WORDS) for _ in range(words))


def config(upstreams: list[str], policy: str, template: Path) -> str:
    """The pool: both servers serve one model; `balance` picks the policy under test."""
    tables = "".join(
        f'[[upstreams]]\nname = "member-{n}"\nbase_url = "{url}"\napi = "completions"\nmodels = ["{MODEL}"]\n'
        f'pool = "gemma"\nchat_template = "{template}"\n\n'
        for n, url in enumerate(upstreams)
    )
    return f'probe = false\nbalance = "{policy}"\n\n{tables}'


async def turn(client: httpx.AsyncClient, body: dict) -> tuple[float, dict]:
    """One streamed turn: seconds to its first text delta, and the completed response."""
    started = time.perf_counter()
    first: float | None = None
    done: dict = {}
    async with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as answer:
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code}: {(await answer.aread()).decode()}")
        async for line in answer.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if first is None and event["type"] == "response.output_text.delta":
                first = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                done = event["response"]
    if first is None or done.get("status") == "failed":
        raise RuntimeError(f"a turn produced no text: {done.get('error') or done.get('status')}")
    return first, done


async def conversation(client: httpx.AsyncClient, kind: str, seed: int, args: argparse.Namespace,
                       start: float) -> list[float]:  # fmt: skip
    """The times to first token of turns 2…N of one conversation."""
    await asyncio.sleep(start)
    turns, document_words, turn_words, answer_tokens = args.turns, args.document_words, args.turn_words, args.answer_tokens
    history: list[dict] = []
    previous: str | None = None
    times = []
    for number in range(turns):
        text = f"Turn {number + 1}. " + passage(seed * 31 + number, turn_words)
        if number == 0:
            text = f"Read this document.\n\n{passage(seed, document_words)}\n\n{text}"
        message = {"role": "user", "content": text}
        body: dict = {"model": MODEL, "max_output_tokens": answer_tokens, "temperature": 0}
        if kind == "chained":
            body |= {"input": [message], "store": True, **({"previous_response_id": previous} if previous else {})}
        else:
            body |= {"input": [*history, message], "store": False}
            if kind == "keyed":
                body["prompt_cache_key"] = f"conversation-{seed}"
        seconds, response = await turn(client, body)
        previous = response["id"]
        answer = "".join(part["text"] for item in response["output"] if item["type"] == "message"
                         for part in item["content"] if part["type"] == "output_text")  # fmt: skip
        history += [message, {"role": "assistant", "content": answer}]
        if number:
            times.append(seconds)
        await asyncio.sleep(start * args.think)
    return times


async def run(url: str, kind: str, args: argparse.Namespace, first_seed: int) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        results = await asyncio.gather(*(
            conversation(client, kind, first_seed + n, args, start=n) for n in range(args.conversations)
        ))  # fmt: skip
    return [seconds for times in results for seconds in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=2, help="conversations at once, per run")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--document-words", type=int, default=1200, help="the first turn's document")
    parser.add_argument("--turn-words", type=int, default=80, help="each turn's own text")
    parser.add_argument("--think", type=float, default=2.0,
                        help="the pause before each turn of the second conversation (the third's is twice it…), seconds")
    parser.add_argument("--answer-tokens", type=int, default=16, help="max_output_tokens of each answer (16 at least)")
    args = parser.parse_args()
    results: dict[tuple[str, str], list[float]] = {}
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-affinity-") as tmp:
        data = Path(tmp)
        gguf = model_file(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "responsekit-tests")
        upstreams = []
        for n in range(2):
            port = free_port()
            command = [sys.executable, str(HERE.parent / "tests" / "llama_server.py"), "--model", str(gguf),
                       "--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192",
                       "--n_threads", "1", "--n_threads_batch", "1", "--interrupt_requests", "false"]  # fmt: skip
            stack.enter_context(service(f"llama-{n}", command, f"http://127.0.0.1:{port}/v1/models"))
            upstreams.append(f"http://127.0.0.1:{port}/v1")
        seed = 0
        for policy in POLICIES:
            settings = data / f"{policy}.toml"
            settings.write_text(config(upstreams, policy, gguf))
            port = free_port()
            command = [sys.executable, "-m", "responsekit", "serve", "--config", str(settings), "--port", str(port),
                       "--data-dir", str(data / policy)]  # fmt: skip
            with service(f"responsekit-{policy}", command, f"http://127.0.0.1:{port}/health"):
                for kind in KINDS:
                    seed += 100  # new conversations: nothing of them is cached on either member
                    results[(policy, kind)] = asyncio.run(run(f"http://127.0.0.1:{port}", kind, args, seed))
                    times = results[(policy, kind)]
                    print(f"{policy:12} {kind:10} p50 {statistics.median(times) * 1000:7.0f} ms  "
                          f"mean {statistics.fmean(times) * 1000:7.0f} ms  ({len(times)} turns)", file=sys.stderr, flush=True)
    minutes = (time.monotonic() - started) / 60
    print(report(args, results, minutes, (load_before, os.getloadavg()[0])))


def report(args: argparse.Namespace, results: dict[tuple[str, str], list[float]], minutes: float,
           load: tuple[float, float]) -> str:  # fmt: skip
    lines = [
        "## Cache affinity in an engine pool (`bench/affinity.py`)",
        "",
        f"`.venv/bin/python bench/affinity.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        (f"{datetime.date.today()}, {describe()}; two llama-cpp-python servers on the real Gemma 3 270M (Q4_K_M), "
         f"one thread each, the KV cache of the last prompt; {args.conversations} conversations at once of {args.turns} turns "
         f"(a {args.document_words}-word document, {args.turn_words} words a turn, {args.answer_tokens}-token answers, "
         f"pausing {args.think:g} s more before each turn than the last conversation); "
         f"{minutes:.1f} minutes, load average {load[0]:.2f} before and {load[1]:.2f} after. Time to first token of "
         "turns 2 and later, in ms."),
        "",
        "| client | affinity p50 | mean | round robin p50 | mean | affinity / round robin (p50) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        mine, theirs = results[("affinity", kind)], results[("round_robin", kind)]
        lines.append(f"| {kind} | {statistics.median(mine) * 1000:.0f} | {statistics.fmean(mine) * 1000:.0f} | "
                     f"{statistics.median(theirs) * 1000:.0f} | {statistics.fmean(theirs) * 1000:.0f} | "
                     f"{statistics.median(mine) / statistics.median(theirs):.2f} |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
