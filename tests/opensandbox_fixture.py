"""A stand-in for an OpenSandbox deployment, on loopback, for the remote runtime's tests.

It speaks OpenSandbox's own HTTP API, as its published specs define it
(https://github.com/alibaba/OpenSandbox/tree/main/specs: `sandbox-lifecycle.yml`, `execd-api.yaml`)
and its servers answer it, for what the `opensandbox` SDK calls:

- the lifecycle server (`/v1/sandboxes…`), which checks the `OPEN-SANDBOX-API-KEY` header as the
  server's auth middleware does (401 `MISSING_API_KEY` / `INVALID_API_KEY`);
- each sandbox's execd, reached at the address `GET /v1/sandboxes/{id}/endpoints/44772` gives (the
  gateway's URI route form, `{address}/{sandboxId}/{port}`); like execd reached directly, it asks
  for no key. Command and code output stream as execd writes them: one bare JSON event followed
  by a blank line (components/execd/pkg/web/controller/sse.go).

The sandboxes are real enough to test with: a folder each, its `/mnt/data` bound in place by
bubblewrap around every command and kernel, which run as plain processes of the host. That is the
fixture's stand-in for a remote container, not an isolation the gateway relies on. A code context
is one Python process that keeps its globals between runs, in place of execd's Jupyter kernel.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from .harness import serve

EXECD_PORT = 44772
EGRESS_PORT = 18080

_KERNEL = r"""
import ast, json, sys, traceback

out = sys.__stdout__
def emit(event):
    out.write(json.dumps(event) + "\n")
    out.flush()

class Stream:
    def __init__(self, name):
        self.name = name
    def write(self, text):
        if text:
            emit({"type": self.name, "text": text})
        return len(text)
    def flush(self):
        pass

sys.stdout, sys.stderr = Stream("stdout"), Stream("stderr")
emit({"pid": __import__("os").getpid()})
scope = {"__name__": "__main__"}
count = 0
while True:
    try:
        line = sys.stdin.readline()
    except KeyboardInterrupt:
        continue
    if not line:
        break
    code = json.loads(line)["code"]
    count += 1
    try:
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), scope)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), scope) if last else None
        emit({"type": "execution_count", "execution_count": count})
        if value is not None:
            emit({"type": "result", "results": {"text": repr(value)}})
        emit({"type": "execution_complete"})
    except BaseException as error:
        lines = traceback.format_exception(error)
        emit({"type": "error", "error": {"ename": type(error).__name__, "evalue": str(error),
                                         "traceback": lines}})
"""


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _millis() -> int:
    return int(time.time() * 1000)


def _event(**fields: Any) -> bytes:
    """One execd stream event: bare JSON and a blank line, as execd writes it."""
    return (
        json.dumps({**fields, "timestamp": fields.get("timestamp") or _millis()}).encode() + b"\n\n"
    )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


@dataclass
class Kernel:
    """A code context: one Python process whose globals persist between runs."""

    process: asyncio.subprocess.Process
    pid: int
    """The Python process's own (bubblewrap's parent process would die of an interrupt)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class FakeSandbox:
    id: str
    root: Path
    request: dict[str, Any]
    created_at: str
    state: str = "Running"
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    kernels: dict[str, Kernel] = field(default_factory=dict)
    default_kernel: str | None = None

    def host_path(self, path: str) -> Path:
        """Where a sandbox path is kept: under the sandbox's folder (only `/mnt/data` is bound in)."""
        return self.root / path.lstrip("/")

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "image": self.request.get("image"),
            "status": {"state": self.state, "lastTransitionAt": self.created_at},
            "metadata": self.request.get("metadata") or {},
            "entrypoint": self.request.get("entrypoint") or ["tail", "-f", "/dev/null"],
            "createdAt": self.created_at,
        }


class OpenSandboxFixture:
    """The service's state, readable by tests: the sandboxes, and every request's headers."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.unauthorized = 0
        self.requests = 0
        self.base = Path(tempfile.mkdtemp(prefix="opensandbox-"))
        self.url = ""

    # --- lifecycle API ---------------------------------------------------------------------

    def _auth(self, request: Request) -> JSONResponse | None:
        key = request.headers.get("OPEN-SANDBOX-API-KEY")
        if key == self.api_key:
            return None
        self.unauthorized += 1
        if not key:
            return _error(401, "MISSING_API_KEY", "Authentication credentials are missing.")
        return _error(401, "INVALID_API_KEY", "Authentication credentials are invalid.")

    def _live(self, sandbox_id: str) -> FakeSandbox | None:
        sandbox = self.sandboxes.get(sandbox_id)
        return sandbox if sandbox and sandbox.state == "Running" else None

    async def create(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        body = await request.json()
        if not body.get("image") or not body.get("entrypoint") or not body.get("resourceLimits"):
            return _error(
                400, "INVALID_REQUEST", "image, entrypoint and resourceLimits are required"
            )
        sandbox_id = str(uuid.uuid4())
        root = self.base / sandbox_id
        (root / "mnt" / "data").mkdir(parents=True)
        sandbox = FakeSandbox(sandbox_id, root, body, _now())
        self.sandboxes[sandbox_id] = sandbox
        info = sandbox.info()
        info.pop("image")
        return JSONResponse(info, status_code=202)

    async def list(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        states = request.query_params.getlist("state")
        wanted = dict(parse_qsl(request.query_params.get("metadata", ""), keep_blank_values=True))
        items = [
            sandbox.info()
            for sandbox in self.sandboxes.values()
            if (not states or sandbox.state in states)
            and all((sandbox.request.get("metadata") or {}).get(k) == v for k, v in wanted.items())
        ]
        page_size = int(request.query_params.get("pageSize", 20))
        page = int(request.query_params.get("page", 1))
        total_pages = max(1, -(-len(items) // page_size))
        pagination = {
            "page": page,
            "pageSize": page_size,
            "totalItems": len(items),
            "totalPages": total_pages,
            "hasNextPage": page < total_pages,
        }
        chosen = items[(page - 1) * page_size : page * page_size]
        return JSONResponse({"items": chosen, "pagination": pagination})

    async def delete(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return _error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        sandbox.state = "Terminated"
        for process in [
            *sandbox.processes.values(),
            *(k.process for k in sandbox.kernels.values()),
        ]:
            _kill(process)
        shutil.rmtree(sandbox.root, ignore_errors=True)
        return Response(status_code=204)

    async def endpoint(self, request: Request) -> Response:
        if denied := self._auth(request):
            return denied
        sandbox = self._live(request.path_params["sandbox_id"])
        if sandbox is None:
            return _error(404, "SANDBOX_NOT_FOUND", "sandbox not found")
        address = self.url.removeprefix("http://")
        return JSONResponse(
            {"endpoint": f"{address}/gateway/{sandbox.id}/{request.path_params['port']}"}
        )

    # --- execd -----------------------------------------------------------------------------

    def _sandbox(self, request: Request) -> FakeSandbox | None:
        return self._live(request.path_params["sandbox_id"])

    def _argv(self, sandbox: FakeSandbox, cwd: str, *command: str) -> list[str]:
        """A process with the sandbox's `/mnt/data` in place, started in `cwd`."""
        workspace = sandbox.host_path("/mnt/data")
        return ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/mnt", "--bind", str(workspace),
                "/mnt/data", "--chdir", cwd, *command]  # fmt: skip

    async def ping(self, request: Request) -> Response:
        return Response(status_code=200) if self._sandbox(request) else Response(status_code=502)

    async def command(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        body = await request.json()
        if not body.get("command"):
            return _error(400, "INVALID_REQUEST_BODY", "command is required")
        timeout = body.get("timeout")
        process = await asyncio.create_subprocess_exec(
            *self._argv(sandbox, body.get("cwd") or "/", "bash", "-c", body["command"]),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        session = uuid.uuid4().hex
        sandbox.processes[session] = process
        return StreamingResponse(self._command_events(sandbox, session, process, timeout),
                                 media_type="text/event-stream")  # fmt: skip

    async def _command_events(
        self,
        sandbox: FakeSandbox,
        session: str,
        process: asyncio.subprocess.Process,
        timeout: int | None,
    ) -> AsyncIterator[bytes]:
        started = time.monotonic()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def pump(stream: asyncio.StreamReader, kind: str) -> None:
            while chunk := await stream.read(4096):
                await queue.put(_event(type=kind, text=chunk.decode(errors="replace")))
            await queue.put(None)

        assert process.stdout and process.stderr
        pumps = [asyncio.create_task(pump(process.stdout, "stdout")),
                 asyncio.create_task(pump(process.stderr, "stderr"))]  # fmt: skip
        killer = (asyncio.get_running_loop().call_later(timeout / 1000, _kill, process)
                  if timeout else None)  # fmt: skip
        try:
            yield _event(type="init", text=session)
            open_streams = 2
            while open_streams:
                item = await queue.get()
                if item is None:
                    open_streams -= 1
                else:
                    yield item
            code = await process.wait()
            if code == 0:
                elapsed = int((time.monotonic() - started) * 1000)
                yield _event(type="execution_complete", execution_time=elapsed)
            else:
                # Go's ExitCode() is -1 for a process ended by a signal (execd's timeout kill).
                value = str(code if code > 0 else -1)
                yield _event(type="error", error={"ename": "CommandExecError", "evalue": value,
                                                  "traceback": [f"exit status {code}"]})  # fmt: skip
        finally:
            if killer:
                killer.cancel()
            _kill(process)
            for task in pumps:
                task.cancel()
            sandbox.processes.pop(session, None)

    async def interrupt_command(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        process = sandbox and sandbox.processes.get(request.query_params.get("id", ""))
        if process:
            _kill(process)
        return Response(status_code=200)

    async def _kernel(self, sandbox: FakeSandbox, session: str) -> Kernel:
        kernel = sandbox.kernels.get(session)
        if kernel is None or kernel.process.returncode is not None:
            process = await asyncio.create_subprocess_exec(
                *self._argv(sandbox, "/", "python3", "-u", "-c", _KERNEL),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                limit=1 << 24,
            )
            assert process.stdout
            pid = json.loads(await process.stdout.readline())["pid"]
            kernel = sandbox.kernels[session] = Kernel(process, pid)
        return kernel

    async def run_code(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        body = await request.json()
        context = body.get("context") or {}
        if not body.get("code"):
            return _error(400, "INVALID_REQUEST_BODY", "code is required")
        if context.get("language", "python") != "python":
            return _error(400, "INVALID_REQUEST_BODY", "only python contexts here")
        session = context.get("id")
        if not session:
            # No context id: execd's default context for the language, made on first use.
            session = sandbox.default_kernel = sandbox.default_kernel or uuid.uuid4().hex
        elif session not in sandbox.kernels:
            return _error(404, "CONTEXT_NOT_FOUND", f"context {session} not found")
        kernel = await self._kernel(sandbox, session)
        if kernel.lock.locked():
            return _error(500, "RUNTIME_ERROR", "error running codes session is busy")
        return StreamingResponse(self._code_events(session, kernel, body["code"]),
                                 media_type="text/event-stream")  # fmt: skip

    async def _code_events(self, session: str, kernel: Kernel, code: str) -> AsyncIterator[bytes]:
        process = kernel.process
        assert process.stdin and process.stdout
        async with kernel.lock:
            started = time.monotonic()
            yield _event(type="init", text=session)
            process.stdin.write(json.dumps({"code": code}).encode() + b"\n")
            await process.stdin.drain()
            while line := await process.stdout.readline():
                event = json.loads(line)
                if event["type"] == "execution_complete":
                    event["execution_time"] = int((time.monotonic() - started) * 1000)
                yield _event(**event)
                if event["type"] in ("execution_complete", "error"):
                    return
            yield _event(type="error", error={"ename": "DeadKernelError", "evalue": "kernel died",
                                              "traceback": []})  # fmt: skip

    async def interrupt_code(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        kernel = sandbox and sandbox.kernels.get(request.query_params.get("id", ""))
        if kernel and kernel.process.returncode is None:
            os.kill(kernel.pid, signal.SIGINT)
        return Response(status_code=200)

    async def upload(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        async with request.form(max_part_size=1 << 30) as form:
            metadata = form.getlist("metadata")
            files = form.getlist("file")
            if not metadata or len(metadata) != len(files):
                return _error(400, "INVALID_FILE_METADATA", "each file needs its metadata part")
            for meta, part in zip(metadata, files, strict=True):
                text = meta if isinstance(meta, str) else (await meta.read()).decode()
                info = json.loads(text)
                target = sandbox.host_path(info["path"])
                target.parent.mkdir(parents=True, exist_ok=True)
                data = part.encode() if isinstance(part, str) else await part.read()
                target.write_bytes(data)
                target.chmod(int(str(info.get("mode") or 644), 8))
        return Response(status_code=200)

    async def download(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        path = request.query_params.get("path")
        if not path:
            return _error(400, "MISSING_QUERY", "missing query parameter 'path'")
        target = sandbox.host_path(path)
        if not target.is_file():
            return _error(404, "FILE_NOT_FOUND", f"file not found. {path}")
        return Response(target.read_bytes(), media_type="application/octet-stream")

    async def files_info(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        found: dict[str, Any] = {}
        for path in request.query_params.getlist("path"):
            target = sandbox.host_path(path)
            if not os.path.lexists(target):
                return _error(404, "FILE_NOT_FOUND", f"file not found. {path}")
            found[path] = _file_info(path, target)
        return JSONResponse(found)

    async def remove_files(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        for path in request.query_params.getlist("path"):
            target = sandbox.host_path(path)
            if target.is_dir():
                return _error(500, "RUNTIME_ERROR", f"path is a directory: {path}")
            target.unlink(missing_ok=True)  # execd: a missing file is no error
        return Response(status_code=200)

    async def make_dirs(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        for path, permission in (await request.json()).items():
            target = sandbox.host_path(path)
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(int(str((permission or {}).get("mode") or 755), 8))
        return Response(status_code=200)

    async def list_directory(self, request: Request) -> Response:
        sandbox = self._sandbox(request)
        if sandbox is None:
            return Response(status_code=502)
        path = request.query_params.get("path", "").rstrip("/") or "/"
        depth = int(request.query_params.get("depth", 1))
        target = sandbox.host_path(path)
        if target.is_symlink():
            return _error(400, "INVALID_REQUEST_BODY", f"path is a symbolic link: {path}")
        if not target.is_dir():
            return _error(404, "FILE_NOT_FOUND", f"directory not found. {path}")

        def walk(folder: Path, name: str, level: int) -> Iterator[dict[str, Any]]:
            for child in sorted(folder.iterdir(), key=lambda p: p.name):
                child_name = f"{name.rstrip('/')}/{child.name}"
                yield _file_info(child_name, child)
                if level < depth and child.is_dir() and not child.is_symlink():
                    yield from walk(child, child_name, level + 1)

        return JSONResponse(list(walk(target, path, 1)))

    # --- the app ---------------------------------------------------------------------------

    def app(self) -> Any:
        """The service as an ASGI app, counting the requests it gets."""
        execd = [
            Route("/ping", self.ping),
            Route("/command", self.command, methods=["POST"]),
            Route("/command", self.interrupt_command, methods=["DELETE"]),
            Route("/code", self.run_code, methods=["POST"]),
            Route("/code", self.interrupt_code, methods=["DELETE"]),
            Route("/files/upload", self.upload, methods=["POST"]),
            Route("/files/download", self.download),
            Route("/files/info", self.files_info),
            Route("/files", self.remove_files, methods=["DELETE"]),
            Route("/directories", self.make_dirs, methods=["POST"]),
            Route("/directories/list", self.list_directory),
        ]

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            yield
            await self._stop_all()

        app = Starlette(
            lifespan=lifespan,
            routes=[
                Route("/v1/sandboxes", self.create, methods=["POST"]),
                Route("/v1/sandboxes", self.list),
                Route("/v1/sandboxes/{sandbox_id}", self.delete, methods=["DELETE"]),
                Route("/v1/sandboxes/{sandbox_id}/endpoints/{port:int}", self.endpoint),
                Mount(f"/gateway/{{sandbox_id}}/{EXECD_PORT}", routes=execd),
            ],
        )

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.requests += 1
            await app(scope, receive, send)

        return counted

    async def _stop_all(self) -> None:
        """Kill every command and kernel left, and reap them while the server's loop still runs."""
        for sandbox in self.sandboxes.values():
            for process in [
                *sandbox.processes.values(),
                *(k.process for k in sandbox.kernels.values()),
            ]:
                _kill(process)
                await process.wait()


def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill a command or kernel and everything it started (its own session)."""
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _file_info(path: str, target: Path) -> dict[str, Any]:
    facts = target.lstat()
    kind = ("symlink" if stat.S_ISLNK(facts.st_mode) else "directory" if stat.S_ISDIR(facts.st_mode)
            else "file" if stat.S_ISREG(facts.st_mode) else "other")  # fmt: skip
    modified = datetime.fromtimestamp(facts.st_mtime, UTC).isoformat().replace("+00:00", "Z")
    return {
        "path": path,
        "type": kind,
        "size": facts.st_size if kind == "file" else 0,
        "modified_at": modified,
        "created_at": modified,
        "owner": "root",
        "group": "root",
        "mode": int(oct(stat.S_IMODE(facts.st_mode))[2:]),
    }


@contextmanager
def opensandbox_server(api_key: str) -> Iterator[OpenSandboxFixture]:
    """The service on a free loopback port; `fixture.url` is its address (the SDK's `domain`)."""
    fixture = OpenSandboxFixture(api_key)
    try:
        with serve(fixture.app()) as url:
            fixture.url = url
            yield fixture
    finally:
        shutil.rmtree(fixture.base, ignore_errors=True)
