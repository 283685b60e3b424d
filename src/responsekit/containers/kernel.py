"""A container's Python kernel seen from the gateway: the sandboxed process running
kernel_server.py, and the socket its requests and replies go over.

A kernel outlives the request that started it, so it is never started from a request's thread:
bubblewrap's `--die-with-parent` is prctl(2)'s PR_SET_PDEATHSIG, which fires when the *thread* that
forked the process exits, not the process. Every kernel is started from one thread that lives as
long as the gateway (`spawn`), and talked to from any thread, with blocking calls bounded by a
deadline.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] | None = None
_started = threading.Lock()


def _serve(
    jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]],
) -> None:
    while True:
        job, future = jobs.get()
        try:
            future.set_result(job())
        except BaseException as error:  # noqa: BLE001  (the caller's to raise; the thread goes on)
            future.set_exception(error)


def spawn(job: Callable[[], T]) -> T:
    """`job` (which starts a process) run on the spawning thread, started once and never ending."""
    global _jobs
    with _started:
        if _jobs is None:
            _jobs = queue.SimpleQueue()
            threading.Thread(
                target=_serve, args=(_jobs,), name="sandbox-spawner", daemon=True
            ).start()
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    _jobs.put((job, future))
    return future.result()


class KernelGone(Exception):
    """The kernel died or stopped answering (killed at a limit, or its reply broke the protocol)."""


@dataclass
class Kernel:
    process: subprocess.Popen[bytes]
    channel: socket.socket

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """The whole sandbox of the kernel: bwrap's pid 1 and with it its pid namespace."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self.channel.close()

    def execute(self, code: str, max_output: int, seconds: float, max_reply: int) -> dict[str, Any]:
        """One request and its reply within `seconds`; `TimeoutError` past them, `KernelGone`
        when the kernel ended or replied with more than `max_reply` bytes."""
        deadline = time.monotonic() + seconds
        request = json.dumps({"code": code, "max_output": max_output}).encode() + b"\n"
        try:
            self.channel.settimeout(seconds)
            self.channel.sendall(request)
            reply = bytearray()
            while not reply.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.channel.settimeout(left)
                chunk = self.channel.recv(1 << 16)
                if not chunk:
                    raise KernelGone("the kernel ended")
                reply += chunk
                if len(reply) > max_reply:
                    raise KernelGone(f"the kernel's reply passed {max_reply} bytes")
        except (BrokenPipeError, ConnectionResetError) as error:
            raise KernelGone("the kernel ended") from error
        except TimeoutError:
            raise
        except OSError as error:
            raise KernelGone(str(error)) from error
        try:
            found = json.loads(reply)
        except ValueError as error:
            raise KernelGone("the kernel's reply was not JSON") from error
        if not isinstance(found, dict):
            raise KernelGone("the kernel's reply was not an object")
        return found


def start(
    argv_for: Callable[[int], tuple[list[str], list[int], Callable[[], None]]],
    env: dict[str, str],
) -> Kernel:
    """A kernel process: `argv_for(fd)` gives bwrap's command line for the kernel's end of the
    socket, the descriptors to pass and the child's set-up; it is started on the spawning thread."""
    ours, theirs = socket.socketpair()
    try:
        argv, fds, setup = argv_for(theirs.fileno())
        try:
            process = spawn(
                lambda: subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    pass_fds=[*fds, theirs.fileno()],
                    # Between fork and exec: cgroup, rlimits, uid (bubblewrap._drop), nothing
                    # that takes a lock another thread could hold.
                    preexec_fn=setup,  # noqa: PLW1509
                    start_new_session=True,
                )
            )
        finally:
            for fd in fds:
                os.close(fd)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return Kernel(process, ours)
