"""What a feature costs the gateway, in instructions per request: immune to a shared machine.

On a small shared machine (a virtual one, its neighbours' load changing by the second) CPU
seconds per request wander by 10–30% from one round to the next, more than the few percent a
feature costs (`bench/gateway.py --rounds` averages them out only partly). Instructions do not
wander: Valgrind's callgrind counts every one a process executes, the same for the same work
whatever else the machine does (https://valgrind.org/docs/manual/cl-manual.html).

Two ResponseKit processes run under callgrind on `bench/fake_engine.py` (it answers at once:
the gateway's own work is all there is): this tree as configured by default (`--revision REV`:
the code of REV, so that edits in progress in the working tree stay out), and a variant: by
default this tree with `RESPONSEKIT_RECORD_USAGE=false`, with `--compare-with REV` the code of
git revision REV. For each route, streamed and not, each gets the same warm-up (`--warmup`
requests, then `--settle` seconds), then its counts are dumped and thrown away, it serves
`--requests` requests at concurrency 4, is left `--settle` seconds for the writes those leave
behind (usage records, stored responses), and its counts are dumped again: the instructions of
every thread of the process since the first dump (the dump's `summary:`), divided by the requests.
The routes: `/v1/responses` (stored and not), `/v1/chat/completions`, `/v1/messages` and Gemini's
(`/v1beta/models/{model}:streamGenerateContent?alt=sse` streamed, `:generateContent` not); a
revision from before a route (not in its OpenAPI schema) reads "—" in that route's cells.
Every cell is measured warm, the first as the others: 30 requests of warm-up are more than the
first requests' one-time work needs (the first cell, 10 requests of `/v1/responses` streamed
after its 30, counted 3.94 M instructions a request, and measured again after 260 more requests
on every route 3.97 and 4.01 M: the background's share moving between cells, no warm-up cost).

Why a dump, not `callgrind_control --zero`, and `summary:`, not `totals:`: callgrind charges
the instructions of the PLT stubs a call goes through (`--skip-plt=yes`, its default; pyenv's
libpython3.11.so makes two of its three calls through them, `_Py_Dealloc` the most) to the
caller's "skipped" cost, which `--zero` leaves as it is. The next dump writes it out with the
caller's lines, so its `totals:` (the sum of its lines) holds instructions from before the zero:
from the process's start, for the first cell measured. `--compare-with cf119c3 --requests 10`
read 10.3 and 9.7 M instructions a request there (`/v1/responses` streamed), for 4.0 and 3.8 M
executed (and 4.7 and 4.5 M stored); the later cells, 0.13–0.19 M a request too many (their
warm-up's). `summary:` counts the instructions since the last dump (or zero) in every thread;
after a dump instead of a zero the lines add up to it, so the dumps `--keep` keeps can be read
function by function (`callgrind_annotate`; `--python-functions`: by Python function).

Under callgrind a process runs some 50 times slower, so a background task that runs once a
second (the usage ledger's write) has about 15 requests' records to write instead of a thousand:
its fixed cost per write weighs more per request here than at full speed, and the figure for
usage recording is an upper bound. For the same reason a cell counts `--settle` seconds and more
of the process's background work (timers, the sweep of background runs: about 0.7 M instructions a
second, idle), shared by its requests: about 0.3 M a request in a cell of 10 requests, 0.015 M in
one of 200. Compare cells with the same `--requests`, 100 or more.

Run: `.venv/bin/python bench/instructions.py` (Valgrind must be installed: Debian's
`valgrind`); prints a Markdown section for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
import pyframes
from gateway import (
    MODEL,
    chat_target,
    code_of,
    free_port,
    gemini_target,
    messages_target,
    responses_target,
    service,
)
from loadgen import Target
from machine import describe

HERE = Path(__file__).parent


def streamed(target: Target, stream: bool) -> Target:
    """The target with `stream` in its body, as the OpenAI and Anthropic APIs take it."""
    target.body = {**target.body, "stream": stream}
    return target


ROUTES: dict[str, Callable[[int, bool], Target]] = {
    "/v1/responses": lambda port, stream: streamed(responses_target(port, MODEL), stream),
    "/v1/responses store": lambda port, stream: streamed(responses_target(port, MODEL, store=True), stream),
    "/v1/chat/completions": lambda port, stream: streamed(chat_target(port, MODEL), stream),
    "/v1/messages": lambda port, stream: streamed(messages_target(port, MODEL), stream),
    "Gemini generateContent": lambda port, stream: gemini_target(port, MODEL, stream),
}
"""The targets `bench/gateway.py` measures, on a gateway's port, streamed or not. Gemini's is
`:streamGenerateContent?alt=sse` streamed, `:generateContent` not."""


def serves(target: Target) -> bool:
    """Whether the gateway serves the target's route: one request answered 200, or, if it is not,
    False when the route is missing from the gateway's OpenAPI schema (a revision from before the
    route), so that its cells read "—"; a route the schema has that fails is an error."""
    base = f"http://127.0.0.1:{target.port}"
    response = httpx.post(base + target.path, json=target.body, headers=target.headers, timeout=300)
    if response.status_code == 200:
        return True
    path = target.path.split("?", 1)[0]
    for template, operations in httpx.get(f"{base}/openapi.json", timeout=60).json().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^}]*\\\}", "[^?]+", re.escape(template))
        if "post" in operations and re.fullmatch(pattern, path):
            raise RuntimeError(f"{target.path}: {response.status_code} {response.text[:200]}")
    return False


async def load(target: Target, requests: int) -> None:
    """`requests` requests, four at a time, each read to its end."""
    left = requests
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{target.port}", timeout=300) as client:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                response = await client.post(target.path, json=target.body, headers=target.headers)
                await response.aread()
                if response.status_code != 200:
                    raise RuntimeError(f"{target.path}: {response.status_code} {response.text[:200]}")

        await asyncio.gather(*(worker() for _ in range(4)))


def dumped(pid: int, out: Path, keep: Path | None = None) -> int:
    """Dump the process's counts since its last dump (`callgrind_control --dump`), which starts
    the next count afresh, and read the instructions the dump counted: its `summary:` (see the
    module's docstring for why not `totals:`). With `keep`, the dump is moved there."""
    before = set(out.parent.glob(f"{out.name}.*"))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for dump in set(out.parent.glob(f"{out.name}.*")) - before:
            text = dump.read_text(errors="replace")
            if "\ntotals:" in text:  # the dump's last line: it is complete
                summary = int(text.split("\nsummary:", 1)[1].split()[0])
                if keep:
                    shutil.move(dump, keep)
                else:
                    dump.unlink()
                return summary
        time.sleep(0.5)
    raise RuntimeError(f"no dump of {pid} appeared")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare-with", metavar="REV",
                        help="against the code of this git revision (default: this tree with RESPONSEKIT_RECORD_USAGE=false)")
    parser.add_argument("--requests", type=int, default=200, help="measured requests per route and server")
    parser.add_argument("--warmup", type=int, default=30, help="unmeasured requests before each measurement")
    parser.add_argument("--settle", type=float, default=2.5,
                        help="seconds left after the requests for the writes they leave behind")
    parser.add_argument("--revision", metavar="REV",
                        help="measure the code of this git revision as 'this tree' (default: the working tree)")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="keep each cell's callgrind dump in DIR (for callgrind_annotate)")
    parser.add_argument("--python-functions", action="store_true",
                        help="with --keep: count by Python function too (bench/pyframes.py; its hook adds 6-8%%)")
    args = parser.parse_args()
    if args.python_functions and not args.keep:
        parser.error("--python-functions needs --keep DIR")
    if shutil.which("callgrind_control") is None:
        sys.exit("Valgrind is not installed (Debian: apt-get install valgrind)")
    other = args.compare_with or "RESPONSEKIT_RECORD_USAGE=false"
    this_name = "this tree"
    if args.revision:  # named by its commit: HEAD or a branch moves
        this_name = subprocess.run(["git", "rev-parse", "--short", args.revision], cwd=HERE.parent, check=True,
                                   capture_output=True, text=True).stdout.strip()  # fmt: skip
    rows: list[str] = []
    started = time.monotonic()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        data = Path(tmp)
        engine_port = free_port()
        engine_url = f"http://127.0.0.1:{engine_port}/v1"
        stack.enter_context(service("engine", [sys.executable, str(HERE / "fake_engine.py"), "--port", str(engine_port)],
                                    f"{engine_url}/models"))  # fmt: skip
        env = code_of(args.compare_with, data / "then") if args.compare_with else {"RESPONSEKIT_RECORD_USAGE": "false"}
        this = code_of(args.revision, data / "now") if args.revision else {}
        hooked = pyframes.build() if args.python_functions else None
        if args.keep:
            args.keep = args.keep.resolve()
            args.keep.mkdir(parents=True, exist_ok=True)
        servers: list[tuple[str, int, int, Path]] = []
        for name, extra in ((this_name, this), (other, {**this, **env})):
            port, out = free_port(), data / f"callgrind-{len(servers)}.out"
            python = [sys.executable, "-m"]
            if hooked:
                python = pyframes.launch_command()
                extra = {**extra, "PYFRAMES_NAMES": str(args.keep / f"{('this', 'other')[len(servers)]}.names.json"),
                         "PYTHONPATH": os.pathsep.join(filter(None, [str(hooked), extra.get("PYTHONPATH")]))}
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *python,
                       "responsekit", "serve", "--upstream", f"bench={engine_url}", "--no-probe", "--port", str(port),
                       "--data-dir", str(data / f"responsekit-{len(servers)}")]  # fmt: skip
            process = stack.enter_context(service(f"responsekit under callgrind ({name})", command,
                                                  f"http://127.0.0.1:{port}/health", env=extra, timeout=900))  # fmt: skip
            if hooked:
                pyframes.arm(process.pid)
            servers.append((name, port, process.pid, out))
        for route, target_on in ROUTES.items():
            for stream in (True, False):
                per_request: list[float | None] = []
                for side, (name, port, pid, out) in zip(("this", "other"), servers, strict=True):
                    target = target_on(port, stream)
                    if not serves(target):  # a revision without the route: not measured
                        per_request.append(None)
                        print(f"{route:24} stream={stream!s:5} {name:32} — (no such route)", file=sys.stderr, flush=True)
                        continue
                    asyncio.run(load(target, args.warmup))
                    time.sleep(args.settle)
                    dumped(pid, out)
                    asyncio.run(load(target, args.requests))
                    time.sleep(args.settle)
                    kept = None
                    if args.keep:
                        cell = f"{route.strip('/').replace('/', '_').replace(' ', '-')}-{'stream' if stream else 'nostream'}"
                        kept = args.keep / f"{cell}.{side}.callgrind"
                    per_request.append(dumped(pid, out, kept) / args.requests)
                    print(f"{route:24} stream={stream!s:5} {name:32} {per_request[-1] / 1e6:7.3f} M instructions/request",
                          file=sys.stderr, flush=True)  # fmt: skip
                now, then = per_request
                cells = [f"{count / 1e6:.3f}" if count is not None else "—" for count in (now, then)]
                ratio = f"{now / then:.3f}" if now is not None and then is not None else "—"
                rows.append(f"| {route} | {'yes' if stream else 'no'} | {cells[0]} | {cells[1]} | {ratio} |")
        if hooked and args.keep:  # the stubs' names, the dumps with them, the functions that cost more
            for side, (_, _, pid, _) in zip(("this", "other"), servers, strict=True):
                pyframes.write_names(pid, args.keep / f"{side}.names.json")
            names = {side: json.loads((args.keep / f"{side}.names.json").read_text()) for side in ("this", "other")}
            tables = []
            for dump in sorted(args.keep.glob("*.this.callgrind")):
                cell = dump.with_name(dump.name.removesuffix(".this.callgrind"))
                if not cell.with_name(f"{cell.name}.other.callgrind").exists():  # a route the other side lacks
                    continue
                for side in ("this", "other"):
                    pyframes.with_python_names(cell.with_name(f"{cell.name}.{side}.callgrind"), names[side],
                                               cell.with_name(f"{cell.name}.{side}.py.callgrind"))  # fmt: skip
                tables += [f"### {cell.name}", "", pyframes.excess(cell, args.requests), ""]
            (args.keep / "excess.md").write_text("\n".join(tables))
    print("\n".join([
        "## Instructions per request (`bench/instructions.py`)",
        "",
        f"`.venv/bin/python bench/instructions.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        (f"{datetime.date.today()}, {describe()}; {(time.monotonic() - started) / 60:.0f} minutes. Every thread of the "
         f"gateway, under callgrind; {args.requests} requests per cell after {args.warmup} of warm-up, 4 at a time, "
         "the engine answering at once (32 tokens). Millions of instructions per request:"),
        "",
        f"| route | stream | {this_name} | {other} | ratio |",
        "|---|---|---:|---:|---:|",
        *rows,
    ]))  # fmt: skip


if __name__ == "__main__":
    main()
