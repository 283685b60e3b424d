"""What runs a container's processes: bubblewrap on this machine, or a remote sandbox service.

A runtime only executes. Which containers exist, whose they are, their files' records and when
they expire are the gateway's, kept in its store (`containers/service.py`), so replicas share
them and a runtime can be swapped without losing track of anything (docs/code-execution.md).
Paths are always inside the container's workspace, `/mnt/data`; code run there is untrusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

WORKSPACE = "/mnt/data"
"""The one writable folder of a container, as code inside it sees it."""


class SandboxUnavailable(RuntimeError):
    """No sandbox can run here (bubblewrap missing, namespaces refused): code is refused, never
    run without one."""


class BadPath(ValueError):
    """A file name that leaves the workspace (`..`, an absolute path elsewhere, a symlink out)."""


class WorkspaceFull(BadPath):
    """A file that would take the workspace past `Limits.disk_bytes`."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one container may use; each call of `run` and `run_code` is bounded by the last three."""

    memory_bytes: int = 1 << 30
    """OpenAI's `memory_limit` (`1g`, `4g`, `16g`, `64g`)."""
    processes: int = 256
    """Processes and threads at once, counted per container, never per uid."""
    disk_bytes: int = 1 << 30
    """What the workspace may hold."""
    cpu_seconds: int = 60
    wall_seconds: float = 30.0
    output_bytes: int = 64 * 1024
    """Of each stream a call returns; past it the text is cut and says so."""


@dataclass(frozen=True, slots=True)
class DomainSecret:
    """A value the host-side proxy adds to requests for `domain`; it never enters the sandbox."""

    domain: str
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class Network:
    """The network a container reaches: none (the default), or the allowed domains through the
    host-side proxy."""

    allowed_domains: tuple[str, ...] | None = None
    secrets: tuple[DomainSecret, ...] = ()


@dataclass(frozen=True, slots=True)
class Completed:
    """A command's end. `exit_code` is None when it was stopped at the wall-clock limit."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class CodeRun:
    """What running code in the container's kernel gave: its text output (streams, results and
    tracebacks, in order), the images it displayed (PNG), and whether it failed or ran out of time."""

    logs: str
    images: list[bytes] = field(default_factory=list)
    error: bool = False
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class Entry:
    """A file in the workspace: its path as code sees it (`/mnt/data/report.csv`) and its size."""

    path: str
    bytes: int


class Runtime(Protocol):
    """Runs containers. Every method may raise `SandboxUnavailable`; file methods raise `BadPath`."""

    name: str

    async def start(self, container_id: str, limits: Limits, network: Network) -> None:
        """Make the container ready to run (again, after a restart of the gateway): idempotent."""

    async def remove(self, container_id: str) -> None:
        """Stop everything the container runs and delete its workspace; a missing one is no error."""

    async def put_file(self, container_id: str, path: str, data: bytes) -> None: ...

    async def get_file(self, container_id: str, path: str) -> bytes | None: ...

    async def list_files(self, container_id: str) -> list[Entry]: ...

    async def delete_file(self, container_id: str, path: str) -> bool: ...

    async def run(self, container_id: str, command: str, *, timeout: float | None = None,
                  max_output: int | None = None) -> Completed:  # fmt: skip
        """`command` by a shell in the workspace, bounded by the container's limits (`timeout` and
        `max_output` only lower them)."""

    async def run_code(
        self, container_id: str, code: str, *, timeout: float | None = None
    ) -> CodeRun:
        """Python in the container's one kernel, whose variables persist between calls."""

    async def close(self) -> None:
        """At the gateway's shutdown: let go of what this process holds for its containers. The
        containers stay, for the next process to start again (`start`)."""
