"""Containers run on an OpenSandbox service (https://github.com/alibaba/OpenSandbox), through its
Python SDKs (`opensandbox`, `opensandbox-code-interpreter`: the `remote-sandbox` extra).

For deployments that outgrow one machine: OpenSandbox schedules each sandbox as a container on
Docker or Kubernetes. One of our containers is one OpenSandbox sandbox, created from a
code-interpreter image (execd and a Jupyter kernel inside), with our limits as its resource limits
and our network as its egress policy.

Nothing here is stored: the sandbox of a container is found again, by any replica, by the
metadata it was created with (`responsekit.dev/container: <container id>`, a label on Kubernetes),
and carries the container's per-call limits the same way. Sandboxes are made with no expiry of
their own; the gateway, which keeps each container's `expires_after`, removes them
(docs/code-execution.md, A remote sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .runtime import (
    WORKSPACE,
    BadPath,
    CodeRun,
    Completed,
    Entry,
    Limits,
    Network,
    SandboxUnavailable,
    WorkspaceFull,
)
from .workspace import parts

if TYPE_CHECKING:
    from code_interpreter.services.code import Codes
    from opensandbox import Sandbox, SandboxManager
    from opensandbox.config import ConnectionConfig

    from ..config import Settings

CONTAINER_KEY = "responsekit.dev/container"
"""The sandbox metadata that names our container."""
_WALL_KEY = "responsekit.dev/wall-seconds"
_OUTPUT_KEY = "responsekit.dev/output-bytes"
_CPU_KEY = "responsekit.dev/cpu-seconds"
_DISK_KEY = "responsekit.dev/disk-bytes"

DEFAULT_IMAGE = "opensandbox/code-interpreter:v1.1.0"
"""OpenSandbox's code-interpreter image: execd with a Jupyter kernel for `run_code`."""
ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]
"""What that image runs (sdks/code-interpreter/python/README.md in OpenSandbox's repository)."""

_GRACE = 10.0
"""Seconds past a call's wall-clock limit the service gets to report it before we stop waiting."""
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _sdk() -> None:
    """Import the SDKs, or say which extra brings them."""
    try:
        import code_interpreter  # noqa: F401
        import opensandbox  # noqa: F401
    except ImportError as error:
        raise SandboxUnavailable(
            "the OpenSandbox runtime needs the `remote-sandbox` extra "
            "(pip install 'responsekit[remote-sandbox]')"
        ) from error


def remote_path(path: str) -> str:
    """The absolute path in the sandbox of a workspace file name (`a/b` or `/mnt/data/a/b`),
    checked as the local sandbox checks one (`workspace.parts`) before anything is sent."""
    return "/".join([WORKSPACE, *parts(path)])


class _Bounded:
    """Text kept up to a number of UTF-8 bytes; past it, counted and said to be cut."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0

    def add(self, text: str) -> None:
        size = len(text.encode())
        self.total += size
        room = self.limit - self.kept
        if room <= 0:
            return
        if size > room:
            text = text.encode()[:room].decode(errors="ignore")
            size = len(text.encode())
        self.parts.append(text)
        self.kept += size

    def text(self) -> str:
        out = "".join(self.parts)
        if self.total > self.kept:
            out += f"\n[output cut: {self.total} bytes in all, the first {self.kept} shown]"
        return out


@dataclass
class _Attached:
    """A container's sandbox as this process reached it."""

    sandbox: Sandbox
    wall_seconds: float
    output_bytes: int
    cpu_seconds: int
    disk_bytes: int
    codes: Codes | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while the code service is made."""
    kernel: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while code runs: execd runs one cell at a time per context ("session is busy")."""


class OpenSandbox:
    """The `Runtime` on an OpenSandbox service."""

    name = "opensandbox"

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        image: str = DEFAULT_IMAGE,
        entrypoint: list[str] | None = None,
        ready_seconds: float = 60.0,
        request_seconds: float = 30.0,
    ) -> None:
        _sdk()
        from opensandbox.config import ConnectionConfig

        self.image = image
        self.entrypoint = entrypoint or ENTRYPOINT
        self.ready = timedelta(seconds=ready_seconds)
        self.config: ConnectionConfig = ConnectionConfig(
            domain=url.rstrip("/"),
            protocol="https" if url.startswith("https://") else "http",
            api_key=api_key,
            request_timeout=timedelta(seconds=request_seconds),
            # The SDK reports each creation's latency to the server; ours are in our own metrics.
            disable_metrics=True,
        )
        self._attached: dict[str, _Attached] = {}
        self._manager: SandboxManager | None = None

    # --- finding a container's sandbox -----------------------------------------------------

    async def _call(self, what: str, call: Any, forget: str | None = None) -> Any:
        """Await an SDK call; the service unreachable or failing is `SandboxUnavailable`. A failure
        about container `forget` drops the sandbox this process knew it by, to be found again (or
        not: another replica may have removed it) by the next call."""
        from opensandbox.exceptions import SandboxException

        try:
            return await call
        except SandboxException as error:
            if forget is not None:
                await self._forget(forget)
            raise SandboxUnavailable(
                f"OpenSandbox at {self.config.get_domain()}: {what} failed: {error}"
            ) from error

    async def _forget(self, container_id: str) -> None:
        """Let go of the sandbox this process knew a container by (its clients closed)."""
        attached = self._attached.pop(container_id, None)
        if attached is not None:
            if attached.codes is not None:
                with contextlib.suppress(Exception):
                    await attached.codes.aclose()  # type: ignore[attr-defined]
            await attached.sandbox.close()

    async def _manager_(self) -> SandboxManager:
        if self._manager is None:
            from opensandbox import SandboxManager

            self._manager = await SandboxManager.create(self.config)
        return self._manager

    async def _sandbox_ids(self, container_id: str) -> list[tuple[str, dict[str, str]]]:
        """The live sandboxes made for a container (normally one), oldest first, with their metadata."""
        from opensandbox.models.sandboxes import SandboxFilter

        manager = await self._manager_()
        found = await self._call(
            "listing sandboxes",
            manager.list_sandbox_infos(
                SandboxFilter(
                    metadata={CONTAINER_KEY: container_id},
                    states=["Pending", "Running"],
                    page_size=20,
                )
            ),
        )
        infos = sorted(found.sandbox_infos, key=lambda info: info.created_at)
        return [(info.id, dict(info.metadata or {})) for info in infos]

    async def _attach(self, container_id: str) -> _Attached | None:
        if attached := self._attached.get(container_id):
            return attached
        from opensandbox import Sandbox

        found = await self._sandbox_ids(container_id)
        if not found:
            return None
        sandbox_id, metadata = found[0]
        sandbox = await self._call(
            f"connecting to sandbox {sandbox_id}",
            Sandbox.connect(sandbox_id, connection_config=self.config, connect_timeout=self.ready),
        )
        defaults = Limits()
        attached = _Attached(
            sandbox,
            wall_seconds=float(metadata.get(_WALL_KEY, defaults.wall_seconds)),
            output_bytes=int(metadata.get(_OUTPUT_KEY, defaults.output_bytes)),
            cpu_seconds=int(metadata.get(_CPU_KEY, defaults.cpu_seconds)),
            disk_bytes=int(metadata.get(_DISK_KEY, defaults.disk_bytes)),
        )
        if container_id in self._attached:  # another call attached it meanwhile
            await sandbox.close()
        return self._attached.setdefault(container_id, attached)

    async def _require(self, container_id: str) -> _Attached:
        attached = await self._attach(container_id)
        if attached is None:
            raise SandboxUnavailable(
                f"container {container_id} has no sandbox on the OpenSandbox service"
            )
        return attached

    # --- the Runtime -----------------------------------------------------------------------

    async def start(self, container_id: str, limits: Limits, network: Network) -> None:
        if await self._attach(container_id):
            return
        from opensandbox import Sandbox
        from opensandbox.models.filesystem import WriteEntry
        from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule

        if network.secrets:
            raise SandboxUnavailable(
                "the OpenSandbox runtime does not add domain secrets; use the bubblewrap runtime for them"
            )
        rules = [
            NetworkRule(action="allow", target=domain) for domain in network.allowed_domains or ()
        ]
        sandbox = await self._call(
            "creating a sandbox",
            Sandbox.create(
                self.image,
                entrypoint=self.entrypoint,
                timeout=None,
                ready_timeout=self.ready,
                resource={"cpu": "1", "memory": f"{max(limits.memory_bytes >> 20, 1)}Mi"},
                metadata={
                    CONTAINER_KEY: container_id,
                    _WALL_KEY: f"{limits.wall_seconds:g}",
                    _OUTPUT_KEY: str(limits.output_bytes),
                    _CPU_KEY: str(limits.cpu_seconds),
                    _DISK_KEY: str(limits.disk_bytes),
                },
                # Deny by default: an empty policy would leave the sandbox's egress open.
                network_policy=NetworkPolicy(default_action="deny", egress=rules),
                connection_config=self.config,
            ),
        )
        attached = _Attached(
            sandbox, limits.wall_seconds, limits.output_bytes, limits.cpu_seconds, limits.disk_bytes
        )
        self._attached[container_id] = attached
        await self._call(
            "making the workspace",
            sandbox.files.create_directories([WriteEntry(path=WORKSPACE, mode=755)]),
            forget=container_id,
        )

    async def remove(self, container_id: str) -> None:
        await self._forget(container_id)
        manager = await self._manager_()
        for sandbox_id, _ in await self._sandbox_ids(container_id):
            await self._call(f"deleting sandbox {sandbox_id}", manager.kill_sandbox(sandbox_id))

    async def put_file(self, container_id: str, path: str, data: bytes) -> None:
        from opensandbox.models.filesystem import WriteEntry

        target = remote_path(path)
        attached = await self._require(container_id)
        # What uploads may add; code inside writes past it only up to the sandbox's own disk.
        held = sum(
            entry.bytes for entry in await self.list_files(container_id) if entry.path != target
        )
        if held + len(data) > attached.disk_bytes:
            raise WorkspaceFull(
                f"{path!r} would take the workspace past {attached.disk_bytes} bytes"
            )
        await self._call(
            f"writing {target}",
            attached.sandbox.files.write_files([WriteEntry(path=target, data=data, mode=644)]),
            forget=container_id,
        )

    async def _kind(self, container_id: str, attached: _Attached, target: str) -> str | None:
        """What `target` is in the sandbox (`file`, `directory`, `symlink`…), None when missing."""
        from opensandbox.exceptions import SandboxApiException

        try:
            found = await attached.sandbox.files.get_file_info([target])
        except SandboxApiException as error:
            if error.status_code == 404:
                return None
            await self._forget(container_id)
            raise SandboxUnavailable(f"OpenSandbox: reading {target} failed: {error}") from error
        info = found.get(target)
        return (info.entry_type or "file") if info else None

    async def get_file(self, container_id: str, path: str) -> bytes | None:
        target = remote_path(path)
        attached = await self._require(container_id)
        kind = await self._kind(container_id, attached, target)
        if kind == "symlink":
            raise BadPath(f"{path!r} is a symbolic link")
        if kind != "file":
            return None
        return await self._call(
            f"reading {target}", attached.sandbox.files.read_bytes(target), forget=container_id
        )

    async def list_files(self, container_id: str) -> list[Entry]:
        from opensandbox.models.filesystem import DirectoryListEntry

        attached = await self._require(container_id)
        entries = await self._call(
            "listing the workspace",
            attached.sandbox.files.list_directory(DirectoryListEntry(path=WORKSPACE, depth=64)),
            forget=container_id,
        )
        return [Entry(entry.path, entry.size) for entry in entries if entry.entry_type == "file"]

    async def delete_file(self, container_id: str, path: str) -> bool:
        target = remote_path(path)
        attached = await self._require(container_id)
        if await self._kind(container_id, attached, target) not in ("file", "symlink"):
            return False
        await self._call(
            f"deleting {target}", attached.sandbox.files.delete_files([target]), forget=container_id
        )
        return True

    async def run(self, container_id: str, command: str, *, timeout: float | None = None,
                  max_output: int | None = None) -> Completed:  # fmt: skip
        from opensandbox.models.execd import ExecutionHandlers, OutputMessage, RunCommandOpts

        attached = await self._require(container_id)
        wall = min(timeout, attached.wall_seconds) if timeout else attached.wall_seconds
        bound = min(max_output, attached.output_bytes) if max_output else attached.output_bytes
        stdout, stderr = _Bounded(bound), _Bounded(bound)
        execution_id: list[str] = []

        async def on_stdout(message: OutputMessage) -> None:
            stdout.add(message.text)

        async def on_stderr(message: OutputMessage) -> None:
            stderr.add(message.text)

        async def on_init(event: Any) -> None:
            execution_id.append(event.id)

        handlers = ExecutionHandlers(
            on_stdout=on_stdout, on_stderr=on_stderr, on_init=on_init, skip_accumulation=True
        )
        # CPU seconds per call, as the local runtime bounds them; execd's own timeout (it kills
        # the command's process group) bounds the wall clock.
        script = f"ulimit -t {attached.cpu_seconds} 2>/dev/null\n{command}"
        opts = RunCommandOpts(working_directory=WORKSPACE, timeout=timedelta(seconds=wall))
        started = time.monotonic()
        task = asyncio.ensure_future(
            attached.sandbox.commands.run(script, opts=opts, handlers=handlers)
        )
        done, _ = await asyncio.wait({task}, timeout=wall + _GRACE)
        if not done:
            task.cancel()
            if execution_id:
                with contextlib.suppress(Exception):
                    await attached.sandbox.commands.interrupt(execution_id[0])
            return Completed(stdout.text(), stderr.text(), None, timed_out=True)
        execution = await self._call("running a command", task, forget=container_id)
        exit_code = execution.exit_code
        if execution.error is not None and exit_code is None:
            stderr.add(f"{execution.error.name}: {execution.error.value}")
        # execd reports a process ended by a signal (its timeout's SIGKILL) as exit code -1.
        if exit_code in (-1, None) and time.monotonic() - started >= wall:
            return Completed(stdout.text(), stderr.text(), None, timed_out=True)
        return Completed(stdout.text(), stderr.text(), exit_code)

    async def _codes(self, attached: _Attached) -> Codes:
        """The code service of the sandbox, its default Python context started in the workspace."""
        async with attached.lock:
            if attached.codes is None:
                from code_interpreter import CodeInterpreter

                # `Sandbox.connect` and `create` already waited for execd; the interpreter's own
                # check would probe Jupyter's port from inside, which `run` below does anyway.
                interpreter = await self._call(
                    "reaching the code interpreter",
                    CodeInterpreter.create(attached.sandbox, skip_health_check=True),
                )
                codes = interpreter.codes
                await self._call(
                    "starting the kernel", codes.run(f"import os\nos.chdir({WORKSPACE!r})")
                )
                attached.codes = codes
            return attached.codes

    async def run_code(
        self, container_id: str, code: str, *, timeout: float | None = None
    ) -> CodeRun:
        attached = await self._require(container_id)
        codes = await self._codes(attached)
        async with attached.kernel:
            try:
                return await self._run_code(codes, attached, code, timeout)
            except SandboxUnavailable:
                await self._forget(container_id)
                raise

    async def _run_code(
        self, codes: Codes, attached: _Attached, code: str, timeout: float | None
    ) -> CodeRun:
        from code_interpreter.models.code import CodeContext
        from opensandbox.models.execd import ExecutionHandlers, OutputMessage

        wall = min(timeout, attached.wall_seconds) if timeout else attached.wall_seconds
        logs = _Bounded(attached.output_bytes)
        session: list[str] = []

        async def on_text(message: OutputMessage) -> None:
            logs.add(message.text)

        async def on_result(result: Any) -> None:
            logs.add(result.text if result.text.endswith("\n") else result.text + "\n")

        async def on_init(event: Any) -> None:
            session.append(event.id)

        handlers = ExecutionHandlers(on_stdout=on_text, on_stderr=on_text, on_result=on_result,
                                     on_init=on_init, skip_accumulation=True)  # fmt: skip
        # No context id: execd's default Python context, one per sandbox, whose variables persist.
        task = asyncio.ensure_future(
            codes.run(code, context=CodeContext(language="python"), handlers=handlers)
        )
        done, _ = await asyncio.wait({task}, timeout=wall)
        timed_out = not done
        if timed_out:
            # Interrupt the kernel (as Jupyter's stop button does) so the context is free for the
            # next call; what it printed until then is kept.
            if session:
                with contextlib.suppress(Exception):
                    await codes.interrupt(session[0])
            done, _ = await asyncio.wait({task}, timeout=_GRACE)
            if not done:
                task.cancel()
                return CodeRun(logs.text(), error=True, timed_out=True)
        execution = await self._call("running code", task)
        if execution.error is not None and not timed_out:
            trace = "\n".join(line.rstrip("\n") for line in execution.error.traceback)
            logs.add(_ANSI.sub("", trace) or f"{execution.error.name}: {execution.error.value}")
        return CodeRun(
            logs.text(), error=execution.error is not None or timed_out, timed_out=timed_out
        )

    async def close(self) -> None:
        """Release the HTTP clients (the sandboxes stay: the gateway removes them)."""
        for container_id in list(self._attached):
            await self._forget(container_id)
        if self._manager is not None:
            await self._manager.close()
            self._manager = None


def remote_runtime(settings: Settings) -> OpenSandbox:
    """The runtime at `sandbox_url` (which selects it), with `sandbox_api_key` and `sandbox_image`;
    `SandboxUnavailable` when the URL is unset or the `remote-sandbox` extra is missing."""
    if not settings.sandbox_url:
        raise SandboxUnavailable(
            "the OpenSandbox runtime needs sandbox_url (the OpenSandbox server)"
        )
    return OpenSandbox(settings.sandbox_url, settings.sandbox_api_key, image=settings.sandbox_image)
