"""The Python kernel inside a container: one namespace that code runs in, call after call.

Run by Debian's /usr/bin/python3 inside the sandbox (bound read-only at `KERNEL_PATH` by
bubblewrap.py), never imported by the gateway; standard library only. Requests come as JSON lines
over the descriptor named by the first argument (one end of a socketpair, the other is the
gateway's): `{"code": str, "max_output": int}`; each gets one JSON line back:
`{"logs": str, "images": [base64 PNG], "error": bool}`.

The logs are what a notebook cell shows, in order: everything written to descriptors 1 and 2
during the call (by print, tracebacks, and the subprocesses code starts), then the value of a
last bare expression, as Jupyter shows it. Past `max_output` bytes they are read and dropped, so a
loop printing forever costs no memory. Figures matplotlib holds after the call come back as PNG,
when code imported matplotlib.pyplot.
"""

import ast
import base64
import io
import json
import linecache
import os
import socket
import sys
import threading
import traceback
import warnings

CELL = "<cell>"
MAX_IMAGES = 8


class Capture:
    """Descriptors 1 and 2 pointed at a pipe for one call, drained by a thread up to a bound."""

    def __init__(self, bound):
        self.bound = bound
        self.kept = bytearray()
        self.total = 0
        read_end, write_end = os.pipe()
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self.thread = threading.Thread(target=self.drain, args=(read_end,), daemon=True)
        self.thread.start()

    def drain(self, fd):
        while chunk := os.read(fd, 1 << 16):
            self.total += len(chunk)
            if len(self.kept) < self.bound:
                self.kept += chunk[: self.bound - len(self.kept)]
        os.close(fd)

    def close(self):
        """The text written, cut at the bound. A background process that still holds the pipe
        is not waited for past a moment."""
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        self.thread.join(timeout=0.5)
        kept = bytes(self.kept)
        text = kept.decode(errors="replace")
        if self.total > len(kept):
            text += f"\n[output cut: {self.total} bytes in all, the first {len(kept)} shown]"
        return text


def run(code, namespace):
    """Execute a cell; its last bare expression's value is printed, as Jupyter shows it."""
    linecache.cache[CELL] = (len(code), None, code.splitlines(True), CELL)
    tree = ast.parse(code, CELL, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, CELL, "exec"), namespace)  # noqa: S102  (running the code is the point)
    if last is not None:
        value = eval(compile(last, CELL, "eval"), namespace)
        if value is not None:
            print(repr(value))


def figures():
    """The figures matplotlib holds, as PNG, then closed (a figure is shown once)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    images = []
    for number in pyplot.get_fignums()[:MAX_IMAGES]:
        buffer = io.BytesIO()
        pyplot.figure(number).savefig(buffer, format="png")
        images.append(base64.b64encode(buffer.getvalue()).decode())
    pyplot.close("all")
    return images


def execute(code, bound, namespace):
    capture = Capture(bound)
    error = False
    try:
        run(code, namespace)
    except BaseException as exc:  # noqa: BLE001  (SystemExit too: the kernel goes on)
        error = True
        # The kernel's own frames are left out: the traceback starts in the cell.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
    logs = capture.close()
    try:
        images = figures()
    except Exception as exc:  # noqa: BLE001  (a figure that fails to draw is the cell's error)
        images, error = [], True
        logs += f"\n[the figures could not be drawn: {exc!r}]"
    return {"logs": logs, "images": images, "error": error}


def main(fd):
    # `plt.show()` has nothing to show on; the figures come back after the call instead.
    warnings.filterwarnings("ignore", message=".*non-interactive.*")
    channel = socket.socket(fileno=fd)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in channel.makefile("rb"):
        request = json.loads(line)
        reply = execute(request["code"], int(request["max_output"]), namespace)
        channel.sendall(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    main(int(sys.argv[1]))
