"""The package, installed without extras into a fresh virtualenv, serves.

`responsekit serve` must start on its base dependencies alone. The shared test environment
has every extra and every test dependency, so a module that only they bring (jinja2 once
came only with the test extras) goes unnoticed there; here it fails. deptry (`make test`)
checks the declarations against the imports; this checks that they are enough to run, with
the pip that `python -m venv` brings (Python 3.11's own, 23.2): pips differ in what they install
for the same declarations (this one left out lxml.html.clean, which reading a page imports).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from .harness import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGE = b"""<!doctype html><html><head><title>Mount Etna</title></head><body><nav>Home</nav><article>
<h1>Mount Etna</h1><p>Mount Etna, on the east coast of Sicily, is one of the most active volcanoes
in the world; its summit craters are almost always degassing.</p></article></body></html>"""
READ_PAGE = """import asyncio, sys
from responsekit.tools.outbound import UrlPolicy
from responsekit.tools.web.fetch import PageFetcher
page = asyncio.run(PageFetcher(UrlPolicy(["127.0.0.1"])).fetch(sys.argv[1]))
print(page.title)
print(page.text)
"""
"""The web tools' page reader, as `web_open_page` runs it (its HTML extraction imports lxml,
trafilatura, justext and lxml.html.clean only when a page is read)."""


@contextmanager
def _site() -> Iterator[str]:
    """An HTML page on loopback (`PAGE`, at any path); yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/etna.html"
    finally:
        server.shutdown()
        server.server_close()


def _sources(destination: Path) -> Path:
    """What a build reads, copied, so the build writes nothing into the checkout."""
    destination.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, destination / name)
    shutil.copytree(ROOT / "src", destination / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return destination


def test_serve_answers_health_with_base_dependencies_only(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # Nothing of the test environment may leak in: not its PYTHONPATH (the checkout's src),
    # nor settings meant for the test servers.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RESPONSEKIT_", "VIRTUAL_ENV"))}
    install = subprocess.run(
        [venv / "bin/python", "-m", "pip", "install", "--quiet", str(_sources(tmp_path / "source"))],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    where = subprocess.run(
        [venv / "bin/python", "-c", "import responsekit; print(responsekit.__file__)"],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed copy, not the checkout
    with _site() as url:
        read = subprocess.run([venv / "bin/python", "-c", READ_PAGE, url], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert read.returncode == 0, read.stdout + read.stderr
    assert read.stdout.startswith("Mount Etna\n") and "most active volcanoes" in read.stdout, read.stdout

    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [venv / "bin/responsekit", "serve", "--no-probe", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"serve exited with {process.returncode}:\n{log_path.read_text()}"
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                if response.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"no /health in 60 s:\n{log_path.read_text()}"
            time.sleep(0.2)
        # The inspector's templates, stylesheet and script are package data: installed, they serve.
        page = httpx.get(f"http://127.0.0.1:{port}/ui", timeout=10)
        assert page.status_code == 200 and "Responses and conversations" in page.text, page.text
        for asset in ("ui.css", "live.js", "front.js", "playground.js"):
            assert httpx.get(f"http://127.0.0.1:{port}/ui/static/{asset}", timeout=10).status_code == 200, asset
        # So are the front page's and the playground's.
        front = httpx.get(f"http://127.0.0.1:{port}/", headers={"accept": "text/html"}, timeout=10)
        assert front.status_code == 200 and "responsekit connect codex" in front.text, front.text
        playground = httpx.get(f"http://127.0.0.1:{port}/ui/playground", timeout=10)
        assert playground.status_code == 200 and "/ui/static/playground.js" in playground.text, playground.text
    finally:
        process.terminate()
        process.wait(15)
    # Without the `llama` extra, the embedded default model cannot run: the server says why
    # (and how to get it) instead of failing.
    health = response.json()
    assert health["status"] == "no_upstream"
    assert "llama-cpp-python" in health["default_model"]["error"] and "responsekit[llama]" in health["default_model"]["error"]
