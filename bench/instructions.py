"""What a feature costs the gateway, in instructions per request: immune to a shared machine.

On a small shared machine (a virtual one, its neighbours' load changing by the second) CPU
seconds per request wander by 10–30% from one round to the next, more than the few percent a
feature costs (`bench/gateway.py --rounds` averages them out only partly). Instructions do not
wander: Valgrind's callgrind counts every one a process executes, the same for the same work
whatever else the machine does (https://valgrind.org/docs/manual/cl-manual.html).

Two ResponseKit processes run under callgrind on `bench/fake_engine.py` (it answers at once:
the gateway's own work is all there is): this tree as configured by default, and a variant: by
default this tree with `RESPONSEKIT_RECORD_USAGE=false`, with `--compare-with REV` the code of
git revision REV. For each route, streamed and not, each gets the same warm-up, then its counts are
zeroed (`callgrind_control --zero`), it serves `--requests` requests at concurrency 4, is left
`--settle` seconds for the writes those leave behind (usage records, stored responses), and its
counts are dumped: the instructions of every thread of the process, divided by the requests.

Under callgrind a process runs some 50 times slower, so a background task that runs once a
second (the usage ledger's write) has about 15 requests' records to write instead of a thousand:
its fixed cost per write weighs more per request here than at full speed, and the figure for
usage recording is an upper bound.

Run: `.venv/bin/python bench/instructions.py` (Valgrind must be installed: Debian's
`valgrind`); prints a Markdown section for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
from gateway import (
    MODEL,
    chat_target,
    code_of,
    free_port,
    messages_target,
    responses_target,
    service,
)
from loadgen import Target
from machine import describe

HERE = Path(__file__).parent
ROUTES: dict[str, Callable[[int], Target]] = {
    "/v1/responses": lambda port: responses_target(port, MODEL),
    "/v1/responses store": lambda port: responses_target(port, MODEL, store=True),
    "/v1/chat/completions": lambda port: chat_target(port, MODEL),
    "/v1/messages": lambda port: messages_target(port, MODEL),
}
"""The targets `bench/gateway.py` measures, on a gateway's port."""


async def load(target: Target, requests: int, stream: bool) -> None:
    """`requests` requests, four at a time, each read to its end."""
    left = requests
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{target.port}", timeout=300) as client:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                response = await client.post(target.path, json={**target.body, "stream": stream}, headers=target.headers)
                await response.aread()
                if response.status_code != 200:
                    raise RuntimeError(f"{target.path}: {response.status_code} {response.text[:200]}")

        await asyncio.gather(*(worker() for _ in range(4)))


def counted(pid: int, out: Path) -> int:
    """Dump the process's counts so far and read their total (`callgrind_control --dump`)."""
    before = set(out.parent.glob(f"{out.name}*"))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for dump in set(out.parent.glob(f"{out.name}*")) - before:
            for line in dump.read_text(errors="replace").splitlines():
                if line.startswith("totals:"):
                    return int(line.split()[1])
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
    args = parser.parse_args()
    if shutil.which("callgrind_control") is None:
        sys.exit("Valgrind is not installed (Debian: apt-get install valgrind)")
    other = args.compare_with or "RESPONSEKIT_RECORD_USAGE=false"
    rows: list[str] = []
    started = time.monotonic()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        data = Path(tmp)
        engine_port = free_port()
        engine_url = f"http://127.0.0.1:{engine_port}/v1"
        stack.enter_context(service("engine", [sys.executable, str(HERE / "fake_engine.py"), "--port", str(engine_port)],
                                    f"{engine_url}/models"))  # fmt: skip
        env = code_of(args.compare_with, data / "then") if args.compare_with else {"RESPONSEKIT_RECORD_USAGE": "false"}
        servers: list[tuple[str, int, int, Path]] = []
        for name, extra in (("this tree", {}), (other, env)):
            port, out = free_port(), data / f"callgrind-{len(servers)}.out"
            command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
                       "responsekit", "serve", "--upstream", f"bench={engine_url}", "--no-probe", "--port", str(port),
                       "--data-dir", str(data / f"responsekit-{len(servers)}")]  # fmt: skip
            process = stack.enter_context(service(f"responsekit under callgrind ({name})", command,
                                                  f"http://127.0.0.1:{port}/health", env=extra, timeout=900))  # fmt: skip
            servers.append((name, port, process.pid, out))
        for route, target_on in ROUTES.items():
            for stream in (True, False):
                per_request = []
                for name, port, pid, out in servers:
                    target = target_on(port)
                    asyncio.run(load(target, args.warmup, stream))
                    time.sleep(args.settle)
                    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True, capture_output=True)
                    asyncio.run(load(target, args.requests, stream))
                    time.sleep(args.settle)
                    per_request.append(counted(pid, out) / args.requests)
                    print(f"{route:24} stream={stream!s:5} {name:32} {per_request[-1] / 1e6:7.3f} M instructions/request",
                          file=sys.stderr, flush=True)  # fmt: skip
                now, then = per_request
                rows.append(f"| {route} | {'yes' if stream else 'no'} | {now / 1e6:.3f} | {then / 1e6:.3f} "
                            f"| {now / then:.3f} |")  # fmt: skip
    print("\n".join([
        "## Instructions per request (`bench/instructions.py`)",
        "",
        f"`.venv/bin/python bench/instructions.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        (f"{datetime.date.today()}, {describe()}; {(time.monotonic() - started) / 60:.0f} minutes. Every thread of the "
         f"gateway, under callgrind; {args.requests} requests per cell after {args.warmup} of warm-up, 4 at a time, "
         "the engine answering at once (32 tokens). Millions of instructions per request:"),
        "",
        f"| route | stream | this tree | {other} | ratio |",
        "|---|---|---:|---:|---:|",
        *rows,
    ]))  # fmt: skip


if __name__ == "__main__":
    main()
