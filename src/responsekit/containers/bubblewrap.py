"""The embedded runtime: each container's processes in bubblewrap (https://github.com/containers/bubblewrap)
on this machine, as an unprivileged uid of their own, in a cgroup of their own.

What is isolated and how, and the pitfalls each choice avoids, are in docs/code-execution.md
("The sandbox"). In short, every sandboxed process is started as:

    (gateway, root) ─ fork ─► enter the container's cgroup, rlimits, drop to the container's uid
                    ─ exec ─► bwrap, with an empty environment, every namespace unshared, no
                              capabilities, the seccomp filter, a read-only system, a private
                              /tmp and the workspace at /mnt/data ─► /bin/sh -c … or the kernel
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import re
import resource
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import cgroups, workspace
from .authority import Authority
from .kernel import Kernel, KernelGone
from .kernel import start as start_kernel
from .proxy import Policy, Proxy, upstream_context
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

log = logging.getLogger("responsekit.containers")

PYTHON = "/usr/bin/python3"
"""Debian's Python, with whatever Debian Python packages are installed (numpy, pandas, matplotlib):
the sandbox sees the system's /usr, never the gateway's venv."""

HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""The whole environment bwrap itself is started with (its pid 1 keeps it, readable at
/proc/1/environ inside the sandbox)."""

UID_BASE = 1_900_000_000
UID_SPAN = 10_000_000
"""Each container runs as a uid of its own from this range, derived from its id: far above the
ranges of a system's users and of the subordinate ids rootless containers use."""

SANDBOX_UID = 1000
"""The uid code sees inside its user namespace (mapped to the container's uid outside)."""

ETC = ("ld.so.cache", "alternatives", "fonts", "ssl", "ca-certificates", "localtime",
       "matplotlibrc", "mime.types", "python3", "python3.11")  # fmt: skip
"""What of the host's /etc the sandbox sees: the loader's cache, the alternatives links /usr/bin
points through, fonts and certificates, Debian Python's configuration. Not the host's users,
groups, hosts, or anything with a secret; /etc/passwd and /etc/group are written for the one user."""

PASSWD = f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/tmp:/bin/sh\n"
GROUP = f"sandbox:x:{SANDBOX_UID}:\n"
HOSTS = "127.0.0.1 localhost\n::1 localhost\n"

SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/.matplotlib",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""The environment code sees: nothing of the gateway's. HOME is the private /tmp, so caches and
dotfiles do not land in the workspace as files the user would see."""

DOOR = "/mnt"
"""Where the container's folder is bound in the mount namespace bwrap starts from (see `_drop`):
a folder every uid may pass through."""

# linux/sched.h, linux/mount.h
CLONE_NEWNS = 0x00020000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
_LIBC = ctypes.CDLL(None, use_errno=True)

KERNEL_PATH = "/opt/responsekit/kernel.py"
"""Where kernel_server.py is, read-only, inside the sandbox."""

PROXY_FOLDER = "/run/responsekit"
PROXY_PORT = 3128
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
FORWARD_PATH = "/opt/responsekit/forward.py"
"""With an allowlist: the folder the proxy's socket is bound at, the port it is forwarded to inside,
the variables that name it, and the forwarder (forward.py)."""

CA_BUNDLE_PATH = "/opt/responsekit/ca-certificates.crt"
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
                "NODE_EXTRA_CA_CERTS")  # fmt: skip
"""With an allowlist: the system's CAs and the proxy's (authority.py; its certificate, never its
key), read-only, and the variables OpenSSL, requests, curl, pip and Node read it from."""

AUTHORITY_FOLDER = ".proxy-ca"
"""In the runtime's root; a name no container id can have."""

TMP_BYTES = 256 << 20
SHM_BYTES = 64 << 20
"""The sizes of the private /tmp and /dev/shm (a tmpfs counts against the container's memory too)."""

_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def container_uid(container_id: str) -> int:
    digest = hashlib.sha256(container_id.encode()).digest()
    return UID_BASE + int.from_bytes(digest[:8], "big") % UID_SPAN


# --- availability ---------------------------------------------------------------------------


@functools.cache
def _filter(python: str) -> bytes:
    """The seccomp filter's BPF, compiled once by Debian's python3-seccomp (seccomp_filter.py)."""
    script = Path(__file__).with_name("seccomp_filter.py")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "filter.bpf"
        done = subprocess.run(
            [python, "-I", str(script), str(out)],
            capture_output=True,
            text=True,
            env={"PATH": HOST_PATH},
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            raise SandboxUnavailable(
                "the seccomp filter could not be built with Debian's python3-seccomp "
                f"({python} -c 'import seccomp'): {done.stderr.strip()[-300:]}"
            )
        return out.read_bytes()


@functools.cache
def _probe(bwrap: str, python: str) -> str | None:
    """Why no sandbox can run here, or None: bubblewrap, root, cgroups and namespaces are tried
    once, for real."""
    if not os.access(bwrap, os.X_OK):
        return f"bubblewrap is not installed ({bwrap} missing): apt-get install bubblewrap"
    if os.geteuid() != 0:
        return (
            "the sandbox needs root, to run code under a uid of its own and in a cgroup of its own "
            "(docs/code-execution.md)"
        )
    if cgroups.layout() is None:
        return "no writable cgroup hierarchy with the memory and pids controllers"
    try:
        bpf = _filter(python)
    except SandboxUnavailable as error:
        return str(error)
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o711)
        (Path(folder) / "data").mkdir()
        os.chown(Path(folder) / "data", UID_BASE, UID_BASE)
        argv, fds = _argv(bwrap, bpf, [python, "-c", "print('ok')"])
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                env={"PATH": HOST_PATH},
                pass_fds=[fd for fd, _ in fds],
                preexec_fn=functools.partial(_drop, [], folder.encode(), UID_BASE, Limits()),
                timeout=30,
                check=False,
            )
        except subprocess.SubprocessError as error:
            return f"bubblewrap cannot start a sandbox here: {error}"
        finally:
            for fd, _ in fds:
                os.close(fd)
    if done.stdout.strip() != b"ok":
        return f"bubblewrap cannot start a sandbox here: {done.stderr.decode(errors='replace').strip()[-300:]}"
    return None


def bubblewrap_runtime(
    root: Path,
    limits: Limits | None = None,
    *,
    bwrap: str | None = None,
    private_networks: bool = False,
    upstream_cafile: Path | None = None,
) -> Bubblewrap:
    """The embedded runtime with its workspaces under `root`, or `SandboxUnavailable` saying why
    this machine cannot run one (never a runtime that would run code unsandboxed)."""
    path = bwrap or shutil.which("bwrap", path=HOST_PATH) or "/usr/bin/bwrap"
    reason = _probe(path, PYTHON)
    if reason is not None:
        raise SandboxUnavailable(reason)
    return Bubblewrap(
        root,
        limits or Limits(),
        bwrap=path,
        private_networks=private_networks,
        upstream_cafile=upstream_cafile,
    )


# --- one sandboxed process ------------------------------------------------------------------


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _argv(
    bwrap: str,
    bpf: bytes,
    command: Sequence[str],
    *,
    files: Sequence[tuple[str, bytes]] = (),
    binds: Sequence[tuple[str, str]] = (),
    env: dict[str, str] | None = None,
) -> tuple[list[str], list[tuple[int, str]]]:
    """bwrap's command line, and the descriptors it reads (to be passed, then closed): written
    files and the filter, as memfds. The container's folder is at `DOOR` (see `_drop`); `binds`
    names folders in it."""
    fds: list[tuple[int, str]] = []

    def fd_of(fd: int, what: str) -> str:
        fds.append((fd, what))
        return str(fd)

    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr"]  # fmt: skip
    for link in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    for name in ETC:
        if os.path.exists(f"/etc/{name}"):
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for path, text in (("/etc/passwd", PASSWD), ("/etc/group", GROUP), ("/etc/hosts", HOSTS)):
        argv += ["--ro-bind-data", fd_of(_memfd(path, text.encode()), path), path]
    for path, content in files:
        argv += ["--ro-bind-data", fd_of(_memfd(path, content), path), path]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
             "--bind", f"{DOOR}/data", WORKSPACE]  # fmt: skip
    for source, target in binds:
        argv += ["--bind", f"{DOOR}/{source}", target]
    # The root bwrap builds (a tmpfs holding the mount points) and its /dev are made read-only
    # last, so /tmp, /dev/shm (multiprocessing's semaphores) and /mnt/data, mounts of their own,
    # are the only writable places.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKSPACE]
    for key, value in (env or SANDBOX_ENV).items():
        argv += ["--setenv", key, value]
    argv += ["--seccomp", fd_of(_memfd("seccomp", bpf), "seccomp"), "--", *command]
    return argv, fds


def _drop(
    procs_files: list[str], folder: bytes, uid: int, limits: Limits, *, cpu: bool = True
) -> None:
    """In the child, before bwrap is exec'd: into the container's cgroup, the per-process limits,
    the container's folder at `DOOR`, then the container's uid (for good: real, effective, saved).

    The folder is bound at `DOOR` in a mount namespace of this child's own because bwrap, run
    unprivileged, resolves a bind's source with the sandbox's uid, which cannot pass the gateway's
    private folders above the workspace (a data dir under /root); the host's mounts are untouched.
    """
    cgroups.enter(procs_files)
    if _LIBC.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if _LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    if _LIBC.mount(folder, DOOR.encode(), None, MS_BIND, None) != 0:
        raise OSError(ctypes.get_errno(), f"mount --bind {DOOR}")
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.disk_bytes, limits.disk_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


async def _bounded(stream: asyncio.StreamReader, bound: int) -> tuple[bytes, int]:
    """The first `bound` bytes of a stream and how many it had in all: what is past the bound is
    read and dropped, never kept."""
    kept = bytearray()
    total = 0
    while chunk := await stream.read(1 << 20):
        total += len(chunk)
        if len(kept) < bound:
            kept += chunk[: bound - len(kept)]
    return bytes(kept), total


def cut(data: bytes, total: int) -> str:
    """Output as text, saying where it was cut."""
    text = data.decode(errors="replace")
    if total > len(data):
        text += f"\n[output cut: {total} bytes in all, the first {len(data)} shown]"
    return text


# --- the runtime ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Container:
    id: str
    folder: Path
    uid: int
    limits: Limits
    network: Network
    group: cgroups.Group
    kernel: Kernel | None = None
    kernel_lock: threading.Lock = field(default_factory=threading.Lock)
    kernel_lost: bool = False
    """A kernel ran before and died (or was stopped): the next one says its variables are gone."""
    proxy: Proxy | None = None

    @property
    def data(self) -> Path:
        return self.folder / "data"


class Bubblewrap:
    """The `Runtime` on this machine (see the module's docstring)."""

    name = "bubblewrap"

    def __init__(
        self,
        root: Path,
        limits: Limits | None = None,
        *,
        bwrap: str = "/usr/bin/bwrap",
        python: str = PYTHON,
        private_networks: bool = False,
        upstream_cafile: Path | None = None,
    ) -> None:
        """`private_networks`: an allowlist may reach names that resolve to loopback or private
        addresses (an intranet the operator trusts); off, only public addresses (proxy.py).
        `upstream_cafile`: one more CA the proxy trusts, besides the system's, when it verifies
        a host it answers TLS for (a test's own server)."""
        self.root = root
        self.limits = limits or Limits()
        self.bwrap = bwrap
        self.python = python
        self.private_networks = private_networks
        self.upstream_cafile = upstream_cafile
        self._containers: dict[str, _Container] = {}
        self._layout: cgroups.Layout | None = None
        self._authority: Authority | None = None
        self._upstream: ssl.SSLContext | None = None
        self._authority_lock = threading.Lock()

    # --- lifecycle

    def _check(self) -> cgroups.Layout:
        reason = _probe(self.bwrap, self.python)
        if reason is not None:
            raise SandboxUnavailable(reason)
        if self._layout is None:
            self._layout = cgroups.layout()
            if self._layout is None:
                raise SandboxUnavailable("no writable cgroup hierarchy")
        return self._layout

    def _proxy_tls(self) -> tuple[Authority, ssl.SSLContext]:
        """The gateway's authority and the proxies' upstream verification, made on first use."""
        with self._authority_lock:
            if self._authority is None or self._upstream is None:
                self._authority = Authority(self.root / AUTHORITY_FOLDER)
                self._upstream = upstream_context(self.upstream_cafile)
            return self._authority, self._upstream

    def _folder(self, container_id: str) -> Path:
        if not _ID.fullmatch(container_id):
            raise BadPath(f"{container_id!r} is not a container id")
        return self.root / container_id

    async def start(self, container_id: str, limits: Limits, network: Network) -> None:
        await asyncio.to_thread(self._start, container_id, limits, network)

    def _start(self, container_id: str, limits: Limits, network: Network) -> _Container:
        layout = self._check()
        folder = self._folder(container_id)
        uid = container_uid(container_id)
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o711)
        data = folder / "data"
        data.mkdir(exist_ok=True)
        os.chown(data, uid, uid, follow_symlinks=False)
        data.chmod(0o755)
        group = cgroups.Group(layout, container_id)
        group.create(limits.memory_bytes, limits.processes)
        found = self._containers.get(container_id)
        if found is not None and (found.limits, found.network) == (limits, network):
            return found
        container = _Container(container_id, folder, uid, limits, network, group)
        if found is not None:
            container.kernel, container.proxy = found.kernel, found.proxy
            if found.network != network and found.kernel is not None:
                # The kernel's sandbox was made for the old network: the next call starts anew.
                found.kernel.kill()
                container.kernel, container.kernel_lost = None, True
        policy = Policy(network, self.private_networks)
        if network.allowed_domains is None:
            if container.proxy is not None:
                container.proxy.close()
                container.proxy = None
        elif container.proxy is not None:
            container.proxy.policy = policy
        else:
            run = folder / "run"
            run.mkdir(exist_ok=True)
            run.chmod(0o755)
            container.proxy = Proxy(run / "proxy.sock", policy, *self._proxy_tls())
        self._containers[container_id] = container
        return container

    def _get(self, container_id: str) -> _Container:
        """A started container; one this process has not started yet (the gateway restarted) is
        started with the runtime's defaults."""
        found = self._containers.get(container_id)
        if found is None:
            found = self._start(container_id, self.limits, Network())
        return found

    async def remove(self, container_id: str) -> None:
        await asyncio.to_thread(self._remove, container_id)

    async def close(self) -> None:
        """The kernels and proxies of the containers this process started stop, and their cgroups
        go; the workspaces stay, and a next process starts them again on first use (`_get`)."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        containers, self._containers = list(self._containers.values()), {}
        for container in containers:
            if container.kernel is not None:
                container.kernel.kill()
            if container.proxy is not None:
                container.proxy.close()
            container.group.remove()

    def _remove(self, container_id: str) -> None:
        folder = self._folder(container_id)
        container = self._containers.pop(container_id, None)
        if container is not None and container.kernel is not None:
            container.kernel.kill()
        if container is not None and container.proxy is not None:
            container.proxy.close()
        layout = self._layout or cgroups.layout()
        if layout is not None:
            cgroups.Group(layout, container_id).remove()
        shutil.rmtree(folder, ignore_errors=True)

    # --- files

    async def put_file(self, container_id: str, path: str, data: bytes) -> None:
        container = await asyncio.to_thread(self._get, container_id)
        await asyncio.to_thread(self._put, container, path, data)

    def _put(self, container: _Container, path: str, data: bytes) -> None:
        workspace.parts(path)
        used = workspace.size(container.data)
        if used + len(data) > container.limits.disk_bytes:
            raise WorkspaceFull(
                f"the workspace holds {used} bytes; {len(data)} more would pass its limit of "
                f"{container.limits.disk_bytes}"
            )
        workspace.write(container.data, path, data, uid=container.uid)

    async def get_file(self, container_id: str, path: str) -> bytes | None:
        container = await asyncio.to_thread(self._get, container_id)
        return await asyncio.to_thread(workspace.read, container.data, path)

    async def list_files(self, container_id: str) -> list[Entry]:
        container = await asyncio.to_thread(self._get, container_id)
        return await asyncio.to_thread(workspace.entries, container.data)

    async def delete_file(self, container_id: str, path: str) -> bool:
        container = await asyncio.to_thread(self._get, container_id)
        return await asyncio.to_thread(workspace.delete, container.data, path)

    # --- commands

    def _spawn_args(
        self,
        container: _Container,
        command: Sequence[str],
        *,
        cpu: bool = True,
        files: Sequence[tuple[str, bytes]] = (),
    ) -> tuple[list[str], list[tuple[int, str]], Callable[[], None]]:
        bpf = _filter(self.python)
        binds: list[tuple[str, str]] = []
        env = SANDBOX_ENV
        if container.network.allowed_domains is not None:
            # The proxy's socket comes in read-only (connecting needs no write to the mount), and
            # a forwarder makes it 127.0.0.1:PROXY_PORT before the command starts.
            binds.append(("run", PROXY_FOLDER))
            files = [*files, (FORWARD_PATH, Path(__file__).with_name("forward.py").read_bytes())]
            socket_path = f"{PROXY_FOLDER}/proxy.sock"
            command = [
                self.python,
                "-I",
                FORWARD_PATH,
                socket_path,
                str(PROXY_PORT),
                "--",
                *command,
            ]
            url = f"http://127.0.0.1:{PROXY_PORT}"
            env = {**SANDBOX_ENV, **{name: url for name in PROXY_VARIABLES}, "NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}  # fmt: skip
            files = [*files, (CA_BUNDLE_PATH, self._proxy_tls()[0].bundle)]
            env |= {name: CA_BUNDLE_PATH for name in CA_VARIABLES}
        argv, fds = _argv(self.bwrap, bpf, command, files=files, binds=binds, env=env)
        setup = functools.partial(
            _drop,
            container.group.procs_files(),
            bytes(container.folder),
            container.uid,
            container.limits,
            cpu=cpu,
        )
        return argv, fds, setup

    async def run(self, container_id: str, command: str, *, timeout: float | None = None,
                  max_output: int | None = None) -> Completed:  # fmt: skip
        container = await asyncio.to_thread(self._get, container_id)
        limits = container.limits
        wall = min(timeout, limits.wall_seconds) if timeout else limits.wall_seconds
        bound = min(max_output, limits.output_bytes) if max_output else limits.output_bytes
        argv, fds, setup = self._spawn_args(container, ["/bin/sh", "-c", command])
        oom_before = container.group.oom_killed()
        try:
            # Spawned from the event loop's thread, which lives as long as the gateway:
            # `--die-with-parent` is tied to the thread that forks (prctl(2), PR_SET_PDEATHSIG).
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"PATH": HOST_PATH},
                pass_fds=[fd for fd, _ in fds],
                preexec_fn=setup,
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise SandboxUnavailable(f"the sandbox could not start: {error}") from error
        finally:
            for fd, _ in fds:
                os.close(fd)
        assert process.stdout is not None and process.stderr is not None
        work = asyncio.ensure_future(
            asyncio.gather(
                _bounded(process.stdout, bound), _bounded(process.stderr, bound), process.wait()
            )
        )
        try:
            done, _ = await asyncio.wait({work}, timeout=wall)
        except asyncio.CancelledError:
            # The caller went away (a closed request): nothing keeps running for nobody.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise
        notes = []
        if not done:
            # The whole sandbox goes: bwrap's pid 1 dies with it (`--die-with-parent`), and with
            # pid 1 every process of its pid namespace.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            notes.append(f"[stopped after {wall:g} seconds, the wall-clock limit]")
        (out, out_total), (err, err_total), code = await work
        if container.group.oom_killed() > oom_before:
            notes.append(
                f"[a process was killed at the memory limit of {limits.memory_bytes} bytes]"
            )
        notes += await asyncio.to_thread(self._disk_notes, container)
        stderr = "\n".join([cut(err, err_total), *notes]) if err else "\n".join(notes)
        return Completed(cut(out, out_total), stderr, None if not done else code, not done)

    def _disk_notes(self, container: _Container) -> list[str]:
        used = workspace.size(container.data)
        if used <= container.limits.disk_bytes:
            return []
        limit = container.limits.disk_bytes
        return [f"[the workspace holds {used} bytes, over its limit of {limit}: delete files]"]

    async def run_code(
        self, container_id: str, code: str, *, timeout: float | None = None
    ) -> CodeRun:
        container = await asyncio.to_thread(self._get, container_id)
        limits = container.limits
        wall = min(timeout, limits.wall_seconds) if timeout else limits.wall_seconds
        # Blocking, on a worker thread: the kernel is reached from whichever event loop asks, and
        # one call at a time per container.
        return await asyncio.to_thread(self._run_code, container, code, wall)

    def _run_code(self, container: _Container, code: str, wall: float) -> CodeRun:
        limits = container.limits
        with container.kernel_lock:
            notes: list[str] = []
            if container.kernel is None or not container.kernel.alive():
                if container.kernel is not None:
                    container.kernel.kill()
                    container.kernel_lost = True
                if container.kernel_lost:
                    log.info(
                        "container %s: the kernel restarted; variables were lost", container.id
                    )
                    notes.append("[the kernel restarted: variables from earlier calls are gone]")
                try:
                    container.kernel = self._start_kernel(container)
                except (OSError, subprocess.SubprocessError) as error:
                    container.kernel = None
                    raise SandboxUnavailable(f"the kernel could not start: {error}") from error
                container.kernel_lost = False
            kernel = container.kernel
            oom_before = container.group.oom_killed()
            try:
                reply = kernel.execute(
                    code, limits.output_bytes, wall, max_reply=4 * limits.output_bytes + (64 << 20)
                )
            except TimeoutError:
                kernel.kill()
                container.kernel_lost = True
                notes.append(
                    f"[stopped after {wall:g} seconds, the wall-clock limit; the kernel restarts "
                    "on the next call, without the variables]"
                )
                return CodeRun("\n".join(notes), error=True, timed_out=True)
            except KernelGone as gone:
                kernel.kill()
                container.kernel_lost = True
                if container.group.oom_killed() > oom_before:
                    why = f"it was killed at the memory limit of {limits.memory_bytes} bytes"
                else:
                    why = str(gone)
                notes.append(
                    f"[the kernel died: {why}; it restarts on the next call, without the variables]"
                )
                return CodeRun("\n".join(notes), error=True)
        logs, images = reply.get("logs"), reply.get("images")
        if not isinstance(logs, str) or not isinstance(images, list):
            # Code can reach the kernel's end of the socket; what it sends is only its own loss.
            return CodeRun("[the kernel's reply was not understood]", error=True)
        try:
            pngs = [base64.b64decode(image, validate=True) for image in images[:8]]
        except (TypeError, ValueError):
            return CodeRun(logs + "\n[the figures could not be read]", error=True)
        text = "\n".join([*notes, logs, *self._disk_notes(container)])
        return CodeRun(text, images=pngs, error=bool(reply.get("error")))

    def _start_kernel(self, container: _Container) -> Kernel:
        source = Path(__file__).with_name("kernel_server.py").read_bytes()

        def argv_for(fd: int) -> tuple[list[str], list[int], Callable[[], None]]:
            argv, fds, setup = self._spawn_args(
                container,
                [self.python, "-I", "-u", KERNEL_PATH, str(fd)],
                cpu=False,
                files=[(KERNEL_PATH, source)],
            )
            return argv, [fd for fd, _ in fds], setup

        return start_kernel(argv_for, {"PATH": HOST_PATH})
