"""Code the server runs in a container: Python in its kernel, shell commands, and a text editor
over its workspace, offered to the model as functions (docs/code-execution.md, "Code
interpreter and shell").

Four functions, each a protocol's view of one container: `python` (Responses'
`code_interpreter`), `shell` (Responses' hosted `shell` tool), `bash` and `text_editor`
(the Messages API's `code_execution_*`, as Anthropic's `bash_code_execution` and
`text_editor_code_execution`). The container is resolved once, when the request's tools are
prepared (`add_code_execution`), so every item can name it from its first event.

Every call's `ToolOutcome` carries a text the model reads and, in `data`, what the renderers
show: `function`, `container` (`id`, `expires_at`), the function's own fields (below), the files
the call wrote (`files`: `file_id`, `path`, `filename`, `bytes`, recorded as the assistant's in
the Containers API) and, on a failure, `error_code` in Anthropic's vocabulary (`unavailable`,
`execution_time_exceeded`, `invalid_tool_input`, `file_not_found`). A failure (no sandbox, an
expired container, a timeout, a bad path) is a failed call the model reads, never an exception.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..canonical.conversation import FunctionTool
from ..canonical.errors import APIError
from ..canonical.server_tools import (
    CODE_FUNCTIONS,
    BadInput,
    CodeFunction,
    CodeSpec,
    python_code,
    shell_action,
)
from ..canonical.toolset import ToolOrigin
from ..containers.runtime import WORKSPACE
from ..containers.service import ContainerFile, Containers
from . import ServerTools, ToolOutcome

log = logging.getLogger(__name__)

MAX_VIEW_CHARS = 16_000
"""Of a file the text editor shows the model: the rest is cut and says so."""

_PYTHON = FunctionTool(
    CODE_FUNCTIONS["python"],
    "Runs Python code in a stateful Jupyter-like kernel and returns what it printed, its last "
    "expression's value and any error. Variables, imports and functions persist between calls. "
    f"Files are in {WORKSPACE}: read the user's files there, and save files you make there (charts, "
    "CSVs) to give them to the user. Display a matplotlib chart with plt.show(). There is no "
    "internet access.",
    {"type": "object", "properties": {"code": {"type": "string", "description": "The Python code to run."}},
     "required": ["code"]},
)  # fmt: skip
_SHELL = FunctionTool(
    CODE_FUNCTIONS["shell"],
    f"Runs shell commands in a sandboxed Linux container, in its workspace {WORKSPACE}, and returns "
    "each one's stdout, stderr and exit code. Files written there persist between calls. There is no "
    "internet access.",
    {"type": "object", "properties": {
        "commands": {"type": "array", "items": {"type": "string"},
                     "description": "The command lines to run in order, each as you would type it in bash."},
        "timeout_ms": {"type": "integer", "description": "Optional time limit for each command, in milliseconds."},
        "max_output_length": {"type": "integer",
                              "description": "Optional: the most characters of each command's output to return."}},
     "required": ["commands"]},
)  # fmt: skip
_BASH = FunctionTool(
    CODE_FUNCTIONS["bash"],
    f"Runs a bash command in a sandboxed Linux container, in its workspace {WORKSPACE}, and returns its "
    "stdout, stderr and return code. Python 3 is installed; files persist between calls. There is no "
    "internet access.",
    {"type": "object", "properties": {"command": {"type": "string", "description": "The bash command to run."}},
     "required": ["command"]},
)  # fmt: skip
_TEXT_EDITOR = FunctionTool(
    CODE_FUNCTIONS["text_editor"],
    f"Views, creates and edits text files in the container's workspace {WORKSPACE}. `view` shows a file "
    "with line numbers (or a folder's files); `create` writes a new file (or replaces one) with "
    "`file_text`; `str_replace` replaces `old_str`, which must occur exactly once, with `new_str`; "
    "`insert` inserts `new_str` after line `insert_line` (0: at the top).",
    {"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
        "path": {"type": "string", "description": f"The file's path, e.g. {WORKSPACE}/script.py."},
        "file_text": {"type": "string", "description": "For create: the file's whole text."},
        "old_str": {"type": "string", "description": "For str_replace: the text to replace, exactly as in the file."},
        "new_str": {"type": "string", "description": "For str_replace and insert: the new text."},
        "insert_line": {"type": "integer", "description": "For insert: the line after which to insert."},
        "view_range": {"type": "array", "items": {"type": "integer"},
                       "description": "For view: optional first and last line to show (1-based; -1: to the end)."}},
     "required": ["command", "path"]},
)  # fmt: skip
FUNCTIONS: dict[CodeFunction, FunctionTool] = {"python": _PYTHON, "shell": _SHELL, "bash": _BASH,
                                               "text_editor": _TEXT_EDITOR}  # fmt: skip


async def add_code_execution(
    tools: ServerTools, specs: Sequence[CodeSpec], owner: str, containers: Containers | None,
    history: Sequence[dict[str, Any]] = (),
) -> None:  # fmt: skip
    """Offer each spec's functions, run in its container, resolved now: an id not the owner's is
    the request's 404, an expired one its 400, no sandbox its 400 (`sandbox_unavailable`)."""
    for spec in specs:
        if containers is None:
            raise APIError(400, "Code execution is not available on this server.", param=spec.param,
                           code="sandbox_unavailable")  # fmt: skip
        container_id = await resolve(spec, owner, containers, history)
        for function in spec.functions:
            runner = _runner(function, owner, container_id, containers)
            tools.add(
                ToolOrigin("code_execution", function, container=container_id),
                FUNCTIONS[function],
                runner,
            )


async def resolve(
    spec: CodeSpec, owner: str, containers: Containers, history: Sequence[dict[str, Any]] = ()
) -> str:
    """The container `spec` names, ready: an id, or for an auto spec the live container the
    conversation's last code call used (`spec.reuse`), else a new one."""
    try:
        if (
            spec.reuse
            and isinstance(spec.container, dict)
            and spec.container.get("type") in ("auto", "container_auto")
        ):
            for container_id in reversed(containers_used(history)):
                found = await containers.get(owner, container_id)
                if found is not None and found.get("status") == "running":
                    await containers.ensure(owner, container_id)
                    return container_id
        return await containers.auto(owner, spec.container)
    except APIError as error:  # where the request named it
        raise APIError(error.status, error.message, param=spec.param if error.param in (None, "container", "container_id")
                       else f"{spec.param}.{error.param}", code=error.code) from None  # fmt: skip


def containers_used(items: Sequence[dict[str, Any]]) -> list[str]:
    """The containers the code calls of a conversation ran in, in order (Responses' items)."""
    used = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "code_interpreter_call" and isinstance(
            item.get("container_id"), str
        ):
            used.append(item["container_id"])
        elif item.get("type") == "shell_call" and isinstance(item.get("environment"), dict):
            container_id = item["environment"].get("container_id")
            if isinstance(container_id, str):
                used.append(container_id)
    return used


def _runner(
    function: CodeFunction, owner: str, container_id: str, containers: Containers
) -> Callable[[str], Awaitable[ToolOutcome]]:
    run = {"python": _python, "shell": _shell, "bash": _bash, "text_editor": _text_editor}[function]

    async def runner(arguments: str) -> ToolOutcome:
        base: dict[str, Any] = {
            "function": function,
            "container": {"id": container_id, "expires_at": None},
        }
        try:
            outcome = await run(arguments, owner, container_id, containers, base)
        except BadInput as bad:
            base["error_code"] = "invalid_tool_input"
            outcome = ToolOutcome("", error=f"Invalid input: {bad}.", data=base)
        except APIError as error:
            base["error_code"] = (
                "file_not_found"
                if error.code == "file_not_found"
                else (
                    "invalid_tool_input"
                    if error.code in ("invalid_path", "invalid_value")
                    else "unavailable"
                )
            )
            outcome = ToolOutcome("", error=error.message, data=base)
        await _expiry(base, owner, container_id, containers)
        return outcome

    return runner


async def _expiry(
    data: dict[str, Any], owner: str, container_id: str, containers: Containers
) -> None:
    """The container's `expires_at` after this use (the Messages API's `container`)."""
    try:
        body = await containers.get(owner, container_id)
    except APIError:
        return
    if body is not None:
        data["container"]["expires_at"] = (
            int(body["last_active_at"]) + int(body["expires_after"]["minutes"]) * 60
        )


# --- the functions ----------------------------------------------------------------------------


async def _python(
    arguments: str, owner: str, container_id: str, containers: Containers, data: dict[str, Any]
) -> ToolOutcome:
    code = python_code(arguments)
    data.update(code=code, logs="", images=[], files=[], error=False, timed_out=False)
    ran, written = await containers.run_code(owner, container_id, code)
    data.update(logs=ran.logs, images=[base64.b64encode(image).decode() for image in ran.images],
                files=_files(written), error=ran.error, timed_out=ran.timed_out)  # fmt: skip
    text = ran.logs.rstrip() or (
        "The code ran and printed nothing." if not ran.error else "The code failed."
    )
    if ran.images:
        text += (
            f"\n[{len(ran.images)} image{'s' if len(ran.images) > 1 else ''} displayed to the user]"
        )
    return _answered(text + _written_note(written), data, ran.timed_out, "The code")


async def _shell(
    arguments: str, owner: str, container_id: str, containers: Containers, data: dict[str, Any]
) -> ToolOutcome:
    commands, timeout_ms, max_length = shell_action(arguments)
    data.update(
        commands=commands, timeout_ms=timeout_ms, max_output_length=max_length, outputs=[], files=[]
    )
    timeout = timeout_ms / 1000 if timeout_ms else None
    written: list[ContainerFile] = []
    for command in commands:
        done, files = await containers.run(
            owner, container_id, command, timeout=timeout, max_output=max_length
        )
        written += files
        stdout, stderr = done.stdout, done.stderr
        if max_length:
            stdout, stderr = stdout[:max_length], stderr[:max_length]
        data["outputs"].append({"stdout": stdout, "stderr": stderr, "exit_code": done.exit_code,
                                "timed_out": done.timed_out})  # fmt: skip
    data["files"] = _files(written)
    return ToolOutcome(shell_text(data["outputs"]) + _written_note(written), data=data)


async def _bash(
    arguments: str, owner: str, container_id: str, containers: Containers, data: dict[str, Any]
) -> ToolOutcome:
    value = _json(arguments)
    command = value.get("command", value.get("cmd")) if isinstance(value, dict) else value
    if not isinstance(command, str) or not command.strip():
        raise BadInput("`command` must be a bash command line")
    data.update(command=command, stdout="", stderr="", exit_code=None, timed_out=False, files=[])
    done, written = await containers.run(owner, container_id, command)
    data.update(stdout=done.stdout, stderr=done.stderr, exit_code=done.exit_code, timed_out=done.timed_out,
                files=_files(written))  # fmt: skip
    return _answered(shell_text([data]) + _written_note(written), data, done.timed_out, "The command")


def _answered(text: str, data: dict[str, Any], timed_out: bool, what: str) -> ToolOutcome:
    """What ran, as the model reads it: a failed call when it ran past the time limit."""
    if not timed_out:
        return ToolOutcome(text, data=data)
    data["error_code"] = "execution_time_exceeded"
    return ToolOutcome("", error=f"{what} was stopped: it ran past the time limit.\n{text}", data=data)


async def _text_editor(
    arguments: str, owner: str, container_id: str, containers: Containers, data: dict[str, Any]
) -> ToolOutcome:
    """Anthropic's text editor over the workspace: `view`, `create`, `str_replace`, `insert`
    (https://docs.claude.com/en/docs/agents-and-tools/tool-use/text-editor-tool)."""
    value = _json(arguments)
    if not isinstance(value, dict):
        raise BadInput("the arguments must be an object with `command` and `path`")
    command, path = value.get("command"), value.get("path")
    if command not in ("view", "create", "str_replace", "insert"):
        raise BadInput("`command` must be view, create, str_replace or insert")
    if not isinstance(path, str) or not path.strip():
        raise BadInput("`path` is missing")
    path = path.strip() if path.strip().startswith("/") else f"{WORKSPACE}/{path.strip()}"
    data.update(command=command, path=path, files=[])
    if command == "view":
        return await _view(value, path, owner, container_id, containers, data)
    if command == "create":
        text = value.get("file_text", value.get("content"))
        if not isinstance(text, str):
            raise BadInput("create needs `file_text`")
        existed = await containers.read_path(owner, container_id, path) is not None
        file = await containers.add_file(
            owner, container_id, data=text.encode(), path=path, source="assistant"
        )
        data.update(is_file_update=existed, files=_files([file]))
        return ToolOutcome(f"{'Updated' if existed else 'Created'} {path}.", data=data)
    old = await containers.read_path(owner, container_id, path)
    if old is None:
        data["error_code"] = "file_not_found"
        return ToolOutcome("", error=f"There is no file {path}.", data=data)
    text = old.decode(errors="replace")
    new_str = value.get("new_str", value.get("insert_text", ""))
    if not isinstance(new_str, str):
        raise BadInput("`new_str` must be a string")
    if command == "str_replace":
        old_str = value.get("old_str")
        if not isinstance(old_str, str) or not old_str:
            raise BadInput("str_replace needs `old_str`")
        count = text.count(old_str)
        if count != 1:
            data["error_code"] = "invalid_tool_input"
            return ToolOutcome("", error=f"`old_str` occurs {count} times in {path}; it must occur exactly once.",
                               data=data)  # fmt: skip
        start = text.index(old_str)
        updated = text.replace(old_str, new_str, 1)
        old_start = text.count("\n", 0, start) + 1
        new_lines = new_str.split("\n")
        data.update(old_start=old_start, old_lines=old_str.count("\n") + 1, new_start=old_start,
                    new_lines=len(new_lines), lines=new_lines)  # fmt: skip
        summary = f"Replaced the text at line {old_start} of {path}."
    else:
        line = value.get("insert_line")
        lines = text.split("\n")
        if isinstance(line, bool) or not isinstance(line, int) or not 0 <= line <= len(lines):
            raise BadInput(f"`insert_line` must be a line number from 0 to {len(lines)}")
        updated = "\n".join([*lines[:line], *new_str.split("\n"), *lines[line:]])
        summary = f"Inserted {new_str.count(chr(10)) + 1} line(s) after line {line} of {path}."
    file = await containers.add_file(
        owner, container_id, data=updated.encode(), path=path, source="assistant"
    )
    data["files"] = _files([file])
    return ToolOutcome(summary, data=data)


async def _view(
    value: dict[str, Any],
    path: str,
    owner: str,
    container_id: str,
    containers: Containers,
    data: dict[str, Any],
) -> ToolOutcome:
    root = path.rstrip("/") == WORKSPACE
    raw = None if root else await containers.read_path(owner, container_id, path)
    if raw is None:
        folder = path.rstrip("/") + "/"
        names = [
            entry
            for entry in await containers.workspace(owner, container_id)
            if entry.startswith(folder)
        ]
        if not names and not root:
            data["error_code"] = "file_not_found"
            return ToolOutcome("", error=f"There is no file {path}.", data=data)
        listing = "\n".join(names) or "(empty)"
        data.update(
            file_type="text",
            content=listing,
            num_lines=len(names),
            start_line=1,
            total_lines=len(names),
        )
        return ToolOutcome(f"Files in {path}:\n{listing}", data=data)
    text = raw.decode(errors="replace")
    lines = text.split("\n")
    first, last = 1, len(lines)
    window = value.get("view_range")
    if isinstance(window, list) and len(window) == 2 and all(isinstance(n, int) for n in window):
        first = max(1, window[0])
        last = len(lines) if window[1] == -1 else min(len(lines), window[1])
    shown = "\n".join(lines[first - 1 : last])
    if len(shown) > MAX_VIEW_CHARS:
        shown = (
            shown[:MAX_VIEW_CHARS]
            + f"\n[cut: the file has {len(text)} characters; view a line range]"
        )
    data.update(
        file_type="text",
        content=shown,
        num_lines=last - first + 1,
        start_line=first,
        total_lines=len(lines),
    )
    numbered = "\n".join(f"{first + n:6}\t{line}" for n, line in enumerate(shown.split("\n")))
    return ToolOutcome(numbered, data=data)


# --- arguments and texts ----------------------------------------------------------------------


def shell_text(outputs: Sequence[dict[str, Any]]) -> str:
    """What the model reads of commands' outputs: each one's stdout, stderr and how it ended."""
    chunks = []
    for position, output in enumerate(outputs):
        lines = [f"Command {position + 1}:"] if len(outputs) > 1 else []
        for stream in ("stdout", "stderr"):
            if output.get(stream):
                lines.append(f"[{stream}]\n{str(output[stream]).rstrip()}")
        lines.append(
            "[timed out]" if output.get("timed_out") else f"[exit code {output.get('exit_code')}]"
        )
        chunks.append("\n".join(lines))
    return "\n\n".join(chunks)


def _written_note(written: Sequence[ContainerFile]) -> str:
    if not written:
        return ""
    return "\nFiles written (the user gets them): " + ", ".join(file.path for file in written)


def _files(written: Sequence[ContainerFile]) -> list[dict[str, Any]]:
    return [{"file_id": file.id, "path": file.path, "filename": file.filename, "bytes": file.bytes}
            for file in written]  # fmt: skip


def _json(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments
