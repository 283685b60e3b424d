"""Where a ResponseKit process spends its time under load: py-spy samples, summed.

Starts `bench/fake_engine.py` and `responsekit serve` in their own processes, drives one
endpoint with the load generator of bench/gateway.py, samples the server with py-spy
(`pip install -e '.[bench]'`; needs ptrace rights, e.g. root) and prints the time by
package and the hottest lines. Worker threads (SQLite's, the thread pool's) are left
out: the event loop's thread is the one that limits throughput.
Run: `.venv/bin/python bench/profile_gateway.py [--path /v1/chat/completions] [--store]
[--token-interval 0.0014]`.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import uvloop
from gateway import HERE, MODEL, chat_target, cpu_seconds, free_port, responses_target, service
from loadgen import run

IDLE = ("Condition.wait", "_worker (concurrent")


def summarize(raw: Path, top: int) -> str:
    packages: collections.Counter[str] = collections.Counter()
    lines: collections.Counter[str] = collections.Counter()
    total = 0
    for entry in raw.read_text().splitlines():
        stack, count = entry.rsplit(" ", 1)
        frames = stack.split(";")
        if any(marker in frame for frame in frames for marker in IDLE):
            continue
        total += int(count)
        found = re.search(r"\(([^/)]+)/", frames[-1])
        packages[found.group(1) if found else frames[-1].split(" ")[0]] += int(count)
        lines[frames[-1]] += int(count)
    out = [f"{total} samples", "", "by package (own time):"]
    out += [f"  {n / total * 100:5.1f}%  {name}" for name, n in packages.most_common(top)]
    out += ["", "hottest lines (own time):"]
    out += [f"  {n / total * 100:5.1f}%  {name}" for name, n in lines.most_common(top)]
    return "\n".join(out)


async def load(args: argparse.Namespace, port: int) -> tuple[int, float]:
    if args.path == "/v1/responses":
        target = responses_target(port, MODEL, store=args.store)
    else:
        target = chat_target(port, MODEL)
    target.last_marker = f"word{args.tokens - 1}".encode()
    samples, seconds, completed = await run(target, args.concurrency, not args.no_stream, args.seconds, 1.0)
    return completed, len(samples) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="/v1/responses", choices=["/v1/responses", "/v1/chat/completions"])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--token-interval", type=float, default=0.0, help="seconds the engine takes per token")
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument("--store", action="store_true", help="/v1/responses with store:true")
    parser.add_argument("--log-level", default="info", help="the server's (info writes an access line per request)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        engine_port, port = free_port(), free_port()
        engine = f"http://127.0.0.1:{engine_port}/v1"
        stack.enter_context(service("engine", [sys.executable, str(HERE / "fake_engine.py"), "--port", str(engine_port),
                                               "--tokens", str(args.tokens), "--token-interval", str(args.token_interval)],
                                    f"{engine}/models"))  # fmt: skip
        server = stack.enter_context(service("responsekit", [
            sys.executable, "-m", "responsekit", "serve", "--upstream", f"bench={engine}", "--no-probe", "--port",
            str(port), "--data-dir", tmp, "--log-level", args.log_level], f"http://127.0.0.1:{port}/health"))  # fmt: skip
        raw = Path(tmp) / "profile.txt"
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(server.pid), "-f", "raw",
                                "-r", "250", "-d", str(int(args.seconds)), "-o", str(raw)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        before = cpu_seconds(server.pid)
        completed, rate = uvloop.run(load(args, port))
        cpu = cpu_seconds(server.pid) - before
        spy.wait(60)
        print(f"{args.path} stream={not args.no_stream} C={args.concurrency}: {rate:.0f} req/s, "
              f"{cpu / max(completed, 1) * 1000:.2f} ms of server CPU per request\n")
        print(summarize(raw, args.top))


if __name__ == "__main__":
    main()
