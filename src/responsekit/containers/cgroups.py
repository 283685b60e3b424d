"""One control group per container: its memory and its processes limited together, whatever uid
or process inside uses them (a per-uid `RLIMIT_NPROC` would let one container's fork bomb starve the
others).

Both cgroup layouts are handled by one code path: v2's single hierarchy (`cgroup.controllers` at
/sys/fs/cgroup, files `memory.max` and `pids.max`; kernel docs admin-guide/cgroup-v2.rst) and v1's
hierarchy per controller (/sys/fs/cgroup/memory and /sys/fs/cgroup/pids, files
`memory.limit_in_bytes` and `pids.max`; admin-guide/cgroup-v1/memory.rst, pids.rst).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "responsekit"
"""The folder every container's group is made in, in each hierarchy."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the groups go: one folder per controller (v1), or the same folder twice (v2)."""

    memory: Path
    pids: Path
    memory_file: str
    swap_file: str | None

    @property
    def folders(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.memory, self.pids)))


def layout(root: Path = CGROUP_ROOT) -> Layout | None:
    """The writable cgroup layout here, or None when there is none (no controllers, read-only)."""
    if (root / "cgroup.controllers").exists():
        controllers = (root / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(controllers):
            return None
        parent = root / PARENT
        try:
            parent.mkdir(exist_ok=True)
            # v2 hands controllers down only where the parent's subtree_control enables them.
            for folder in (root, parent):
                (folder / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            return None
        return Layout(parent, parent, "memory.max", "memory.swap.max")
    memory, pids = root / "memory" / PARENT, root / "pids" / PARENT
    try:
        for folder in (memory, pids):
            folder.mkdir(exist_ok=True)
    except OSError:
        return None
    return Layout(memory, pids, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes")


@dataclass(frozen=True, slots=True)
class Group:
    """One container's group, in each hierarchy of the layout."""

    layout: Layout
    name: str

    @property
    def folders(self) -> tuple[Path, ...]:
        return tuple(folder / self.name for folder in self.layout.folders)

    def create(self, memory_bytes: int, processes: int) -> None:
        for folder in self.folders:
            folder.mkdir(exist_ok=True)
        memory = self.layout.memory / self.name
        (memory / self.layout.memory_file).write_text(str(memory_bytes))
        # Swap would let a memory bomb outlive the limit on a machine with swap; v1 has the knob
        # only when the kernel accounts swap.
        if self.layout.swap_file and (memory / self.layout.swap_file).exists():
            with contextlib.suppress(OSError):
                value = "0" if self.layout.swap_file == "memory.swap.max" else str(memory_bytes)
                (memory / self.layout.swap_file).write_text(value)
        (self.layout.pids / self.name / "pids.max").write_text(str(processes))

    def procs_files(self) -> list[str]:
        """The files a process writes its pid to join the group (read by `enter`, in the child)."""
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders:
            with contextlib.suppress(OSError):
                found.update(int(pid) for pid in (folder / "cgroup.procs").read_text().split())
        return found

    def oom_killed(self) -> int:
        """How many processes the memory limit killed so far: the `oom_kill` count of
        memory.events (v2) or memory.oom_control (v1)."""
        name = "memory.events" if self.layout.memory_file == "memory.max" else "memory.oom_control"
        try:
            for line in (self.layout.memory / self.name / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill(self) -> None:
        """SIGKILL every process in the group until none is left (a fork bomb forks while it is
        being killed, hence the loop)."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill()
        for folder in self.folders:
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # Busy until the killed processes are reaped.
                    time.sleep(0.02)


def enter(procs_files: list[str]) -> None:
    """Move the calling process into the group: run in the child between fork and exec, so
    everything the sandbox starts is counted from its first instruction."""
    pid = str(os.getpid()).encode()
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)
