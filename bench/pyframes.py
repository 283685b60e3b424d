"""Callgrind's counts by Python function: which functions a change makes cost more.

Callgrind sees C functions; CPython 3.11 runs the Python functions a Python function calls in the
same C frame of `_PyEval_EvalFrameDefault`, so its per-function output says nothing of the Python
code. This module gives every Python function a native function of its own for callgrind to see:
a C extension (built here once, into `bench/.pyframes/`) with 16,384 stubs `pyfn_0` …
`pyfn_16383`, each a call of `_PyEval_EvalFrameDefault`, and a frame-evaluation hook (PEP 523)
that runs each code object's frames through its own stub, numbered in the order code objects are
first run once the hook is on (code objects past the last stub share it). A stub's inclusive
cost in a dump is then its Python function's: what its frames ran, the functions they called
included (a coroutine's: over all its resumptions, what it awaited included).

The hook changes what it measures: no Python call is inlined in its caller's C frame any more,
and each call passes the hook and a stub: 6–8% more instructions a request through the gateway
(2026-11-27, 04edf93: `/v1/chat/completions` streamed 4.031 M against 3.751 M unhooked).
Compare counts taken under it with each other (two processes both hooked), not with counts
taken without.

`bench/instructions.py --python-functions --keep DIR` runs its servers through `launch` (below),
turns the hook on before the first warm-up, and at the end writes each process's stub names next
to the dumps kept in DIR (`this.names.json`, `other.names.json`), the dumps with Python names
(`*.py.callgrind`, for `callgrind_annotate --inclusive=yes`), and the functions by which the
first process exceeds the second in each cell (`excess.md`). Or by hand:

    .venv/bin/python bench/pyframes.py excess DIR/v1_chat_completions-stream --requests 200
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
STUBS = 16384
ARM = signal.SIGUSR2
"""Turns the hook on in a launched process."""
WRITE_NAMES = signal.SIGUSR1
"""Makes a launched process write its stubs' names (to the file `launch` was given)."""

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE
#include <Python.h>
#include "internal/pycore_frame.h"

typedef PyObject *(*evalfn)(PyThreadState *, struct _PyInterpreterFrame *, int);

/* A call, not a jump: callgrind then sees each stub as the caller of the frame's evaluation. */
#define STUB(n) __attribute__((noinline, used)) PyObject *pyfn_##n(PyThreadState *t, \
    struct _PyInterpreterFrame *f, int x) { PyObject *r = _PyEval_EvalFrameDefault(t, f, x); \
    __asm__ volatile("" : : "r"(r) : "memory"); return r; }
@STUBS@
static const evalfn stubs[@N@] = {@TABLE@};

/* A code object's stub number + 1, in its extra slot; `codes` holds them by stub number. */
static Py_ssize_t extra_index = -1;
static PyObject *codes;

static PyObject *
eval(PyThreadState *t, struct _PyInterpreterFrame *f, int x)
{
    PyObject *code = (PyObject *)f->f_code;
    void *v = NULL;
    if (_PyCode_GetExtra(code, extra_index, &v) < 0) {
        PyErr_Clear();
        v = NULL;
    }
    intptr_t i = (intptr_t)v;
    if (i == 0) {
        Py_ssize_t n = PyList_GET_SIZE(codes);
        i = @N@;
        if (n < @N@ - 1) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            if (PyList_Append(codes, code) == 0)
                i = n + 1;
            else
                PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
        _PyCode_SetExtra(code, extra_index, (void *)i);
    }
    return stubs[i - 1](t, f, x);
}

static PyObject *
install(PyObject *self, PyObject *unused)
{
    _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), eval);
    Py_RETURN_NONE;
}

static PyObject *
names(PyObject *self, PyObject *unused)
{
    PyObject *result = PyList_New(0);
    for (Py_ssize_t i = 0; result && i < PyList_GET_SIZE(codes); i++) {
        PyCodeObject *c = (PyCodeObject *)PyList_GET_ITEM(codes, i);
        PyObject *row = Py_BuildValue("(OOi)", c->co_qualname, c->co_filename, c->co_firstlineno);
        if (!row || PyList_Append(result, row) < 0)
            Py_CLEAR(result);
        Py_XDECREF(row);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, "Run each code object's frames through a stub of its own."},
    {"names", names, METH_NOARGS, "[(qualname, filename, first line)] of pyfn_0, pyfn_1, ..."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pyframes", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__pyframes(void)
{
    extra_index = _PyEval_RequestCodeExtraIndex(NULL);
    codes = PyList_New(0);
    if (extra_index < 0 || !codes)
        return NULL;
    return PyModule_Create(&module);
}
"""


def build() -> Path:
    """The directory holding the built extension (built on first use: about a minute)."""
    if sys.version_info[:2] != (3, 11):
        sys.exit("bench/pyframes.py hooks CPython 3.11's frame evaluation; this is " + sys.version)
    source = (_SOURCE.replace("@STUBS@", "\n".join(f"STUB({i})" for i in range(STUBS)))
              .replace("@TABLE@", ", ".join(f"pyfn_{i}" for i in range(STUBS)))
              .replace("@N@", str(STUBS)))  # fmt: skip
    include = sysconfig.get_paths()["include"]
    key = hashlib.sha256(f"{source}{include}{sys.version}".encode()).hexdigest()[:12]
    directory = HERE / ".pyframes" / key
    library = directory / f"_pyframes{sysconfig.get_config_var('EXT_SUFFIX')}"
    if not library.exists():
        directory.mkdir(parents=True, exist_ok=True)
        (directory.parent / ".gitignore").write_text("*\n")  # a build, not sources
        (directory / "_pyframes.c").write_text(source)
        print("building bench/pyframes.py's extension (about a minute)", file=sys.stderr, flush=True)
        # No identical-code folding and no tail calls: every stub stays a function of its own that calls.
        subprocess.run(["cc", "-O1", "-g", "-fPIC", "-shared", "-fno-ipa-icf", "-fno-optimize-sibling-calls",
                        f"-I{include}", f"-I{include}/internal", "_pyframes.c", "-o", library.name + ".part"],
                       cwd=directory, check=True)  # fmt: skip
        (directory / (library.name + ".part")).rename(library)
    return directory


def launch_command() -> list[str]:
    """What runs `python -m MODULE ARGS…` with the hook ready to be turned on (add `MODULE
    ARGS…`). Its environment: `build()`'s directory on PYTHONPATH, and `PYFRAMES_NAMES`, the
    file it writes its stubs' names to when asked (`write_names`)."""
    return [sys.executable, str(Path(__file__).resolve()), "launch", "-m"]


def _launch(argv: list[str]) -> None:
    import runpy

    import _pyframes  # type: ignore[import-not-found]

    names = Path(os.environ["PYFRAMES_NAMES"])

    def write(*_: object) -> None:
        part = names.with_name(names.name + ".part")
        part.write_text(json.dumps(_pyframes.names()))
        part.rename(names)

    signal.signal(ARM, lambda *_: _pyframes.install())
    signal.signal(WRITE_NAMES, write)
    if argv[:1] != ["-m"] or len(argv) < 2:
        sys.exit("usage: pyframes.py launch -m MODULE [ARGS...]")
    sys.path[0] = os.getcwd()  # as `python -m` has it, not bench/ (whose modules could shadow others)
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


def arm(pid: int) -> None:
    """Turn the hook on in a launched process: the code objects it runs from now get stubs."""
    os.kill(pid, ARM)


def write_names(pid: int, names: Path, timeout: float = 120) -> None:
    """Ask a launched process (whose PYFRAMES_NAMES is `names`) for its stubs' names; wait for them."""
    names.unlink(missing_ok=True)
    os.kill(pid, WRITE_NAMES)
    deadline = time.monotonic() + timeout
    while not names.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} wrote no names to {names}")
        time.sleep(0.5)


# --- reading dumps ----------------------------------------------------------------------------

_STUB = re.compile(r"pyfn_(\d+)(?:'(\d+))?$")


def _where(filename: str) -> str:
    """A code object's file, the same in two checkouts: from the package or site-packages on."""
    for marker in ("/site-packages/", "/src/", "/lib/python3.11/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename


def label(row: list) -> str:
    qualname, filename, _ = row
    return f"{_where(filename)}:{qualname}"


def python_functions(dump: Path, names: list[list]) -> dict[str, tuple[int, int]]:
    """Python function -> (inclusive instructions, frames run) in a dump: the costs of the calls
    its stub made at recursion level 1 (a stub's calls at deeper levels are inside those already).
    A frame run is a call of the stub: a call of the function, or a coroutine's resumption."""
    defined: dict[str, str] = {}
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    stub: tuple[int, int] | None = None  # (number, recursion level) of the current fn=, if a stub
    calls = 0
    call_cost_next = False
    for line in dump.open(errors="replace"):
        if line.startswith(("fn=", "cfn=")):
            match = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
            name = line.split("=", 1)[1].rstrip("\n")
            if match:
                if match.group(2) is not None:
                    defined[match.group(1)] = match.group(2)
                name = defined.get(match.group(1), name)
            if line.startswith("fn="):
                found = _STUB.match(name)
                stub = (int(found.group(1)), int(found.group(2) or 1)) if found else None
        elif line.startswith("calls="):
            calls = int(line.split("=", 1)[1].split()[0])
            call_cost_next = True
        elif call_cost_next and line[:1] in "0123456789+-*":
            call_cost_next = False
            if stub and stub[1] == 1 and stub[0] < len(names):
                entry = totals[label(names[stub[0]])]
                entry[0] += int(line.split()[1])
                entry[1] += calls
    return {key: (cost, count) for key, (cost, count) in totals.items()}


def with_python_names(dump: Path, names: list[list], out: Path) -> None:
    """The dump with each stub named by its Python function, for callgrind_annotate."""

    def renamed(match: re.Match[str]) -> str:
        number = int(match.group(2))
        name = label(names[number]) if number < len(names) else "(code objects past the last stub)"
        return f"{match.group(1)}{name}:{names[number][2] if number < len(names) else 0}{match.group(3) or ''}"

    pattern = re.compile(r"^((?:c?fn)=\(\d+\) )pyfn_(\d+)('\d+)?$")
    with dump.open(errors="replace") as source, out.open("w") as sink:
        for line in source:
            sink.write(pattern.sub(renamed, line.rstrip("\n")) + "\n")


def _moved(now: dict[str, tuple[int, int]], then: dict[str, tuple[int, int]]) -> dict[str, str]:
    """A function of `now` -> the same function in `then` under another path: a module moved to
    another package keeps its file name and the function its qualified name (`a/x.py:f` and
    `b/x.py:f`, when each is the only one of its name on its side)."""

    def by_name(functions: dict[str, tuple[int, int]], others: dict[str, tuple[int, int]]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = defaultdict(list)
        for key in functions.keys() - others.keys():
            where, _, qualname = key.partition(":")
            found[f"{where.rsplit('/', 1)[-1]}:{qualname}"].append(key)
        return found

    new, gone = by_name(now, then), by_name(then, now)
    return {keys[0]: gone[name][0] for name, keys in new.items() if len(keys) == 1 and len(gone.get(name, [])) == 1}


def excess(cell: Path, requests: int, top: int = 10) -> str:
    """The `top` Python functions by which `CELL.this` exceeds `CELL.other` in inclusive
    instructions per request, as a Markdown table (the functions, and frames run per request);
    a function whose module moved is compared with itself (`_moved`)."""
    counted = []
    for side in ("this", "other"):
        names = json.loads((cell.parent / f"{side}.names.json").read_text())
        counted.append(python_functions(cell.with_name(f"{cell.name}.{side}.callgrind"), names))
    now, then = counted
    moved = _moved(now, then)
    pairs = {key: moved.get(key, key) for key in now} | {key: key for key in then.keys() - set(moved.values())}
    rows = sorted(((now.get(key, (0, 0))[0] - then.get(old, (0, 0))[0], key, old) for key, old in pairs.items()),
                  reverse=True)[:top]  # fmt: skip
    lines = ["| function | this tree | other | excess | frames run, this / other |", "|---|---:|---:|---:|---:|"]
    for difference, key, old in rows:
        (a, calls_a), (b, calls_b) = now.get(key, (0, 0)), then.get(old, (0, 0))
        name = f"`{key}`" + (f" (`{old.partition(':')[0]}` there)" if old != key else "")
        lines.append(f"| {name} | {a / requests:,.0f} | {b / requests:,.0f} | {difference / requests:+,.0f} "
                     f"| {calls_a / requests:g} / {calls_b / requests:g} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["launch"]:
        _launch(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the extension")
    table = commands.add_parser("excess", help="functions by which CELL.this exceeds CELL.other")
    table.add_argument("cell", type=Path, help="a cell's dumps kept by instructions.py, without .this/.other")
    table.add_argument("--requests", type=int, required=True, help="the requests the dumps counted")
    table.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    if args.command == "build":
        print(build())
    else:
        print(excess(args.cell, args.requests, args.top))


if __name__ == "__main__":
    main()
