"""Anthropic's code execution server tool (`code_execution_*`) on open models
(docs/code-execution.md, "Messages API code execution").

The request's tool becomes the pipeline's code functions (`CodeSpec`, run by
`tools/code_execution.py` in a container of the key's), its top-level `container` the container
they run in (a new one without it), and `container_upload` blocks files put into that container
before the model runs. Each call the server runs is a `server_tool_use` block and a result block
of the `anthropic` SDK's beta types:

- `code_execution_20250522` is Python only: the model is offered `python`, whose calls are
  `server_tool_use` blocks named `code_execution` and `code_execution_tool_result` blocks;
- every later version (`code_execution_20250825`, `_20260120`, `_20260521`, and newer ones)
  offers `bash_code_execution` and `text_editor_code_execution`, whose calls are blocks of those
  names and `bash_code_execution_tool_result` / `text_editor_code_execution_tool_result` blocks.

A replayed call and its result reach the model as the call it made and the text it read.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ...canonical.conversation import TextPart, ToolCall
from ...canonical.errors import APIError
from ...canonical.server_tools import CODE_FUNCTIONS, CodeFunction, CodeSpec
from ...canonical.toolset import ToolOrigin
from ...containers.runtime import WORKSPACE
from ...containers.service import Containers
from ...files.service import VectorStores

PREFIX = "code_execution_"
PYTHON_ONLY = "code_execution_20250522"
MAX_CODE_CALLS = 20
"""Code calls the server runs for one answer before the model must answer without tools.
Anthropic documents no bound; an open model that keeps calling must not loop forever (the MCP
connector's calls are bounded the same way). It adds to the other server tools' budgets."""

BLOCK_NAMES: dict[str, str] = {"python": "code_execution", "bash": "bash_code_execution",
                               "text_editor": "text_editor_code_execution"}  # fmt: skip
"""Each code function -> the `name` of its calls' `server_tool_use` blocks."""
RESULT_TYPES: dict[str, str] = {"python": "code_execution_tool_result", "bash": "bash_code_execution_tool_result",
                                "text_editor": "text_editor_code_execution_tool_result"}  # fmt: skip
"""Each code function -> the type of its result blocks."""
FUNCTIONS: dict[str, CodeFunction] = {"code_execution": "python", "bash_code_execution": "bash",
                                      "text_editor_code_execution": "text_editor"}  # fmt: skip
"""A replayed `server_tool_use` block's name -> the code function it called."""


def is_code_execution(tool: dict[str, Any]) -> bool:
    return str(tool.get("type") or "").startswith(PREFIX)


def code_spec(tool: dict[str, Any], container: str | None) -> CodeSpec:
    """The code functions a `code_execution_*` tool offers, run in `container` (the request's,
    else a new one: Anthropic makes one for a request without `container`)."""
    functions: tuple[CodeFunction, ...] = (
        ("python",) if tool.get("type") == PYTHON_ONLY else ("bash", "text_editor")
    )
    return CodeSpec(container if container is not None else {"type": "auto"}, functions, param="container",
                    reuse=False)  # fmt: skip


def container_of(value: Any) -> str | None:
    """The container a request names: its `container` as an id, or as `{"id", "skills"}` (the
    `anthropic` SDK's `BetaContainerParams`); skills are not served (a 400, as the Containers API
    refuses them)."""
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("skills"):
            raise APIError(400, "container.skills: skills are not supported on this server.", param="container.skills",
                           code="unsupported_parameter")  # fmt: skip
        value = value.get("id")
        if value is None:
            return None
    if not isinstance(value, str) or not value:
        raise APIError(400, "container: expected a container id, or an object with an `id`.", param="container",
                       code="invalid_value")  # fmt: skip
    return value


def container_id(served: dict[str, ToolOrigin]) -> str | None:
    """The container the request's code functions run in (the pipeline resolved it), if any."""
    return next((origin.container for origin in served.values()
                 if origin.kind == "code_execution" and origin.container), None)  # fmt: skip


def container_body(container: dict[str, Any]) -> dict[str, Any]:
    """The answer's `container` (the SDK's `BetaContainer`) for a Container object: its id and
    when it expires."""
    expires = container["last_active_at"] + container["expires_after"]["minutes"] * 60
    return {"id": container["id"], "expires_at": rfc3339(expires)}


def rfc3339(seconds: int) -> str:
    """A Unix time as Anthropic writes times (`2025-08-25T12:00:00Z`)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def put_uploads(containers: Containers, files: VectorStores, owner: str, spec: CodeSpec,
                      uploads: list[tuple[str, TextPart]]) -> None:  # fmt: skip
    """The Files API files of the user's `container_upload` blocks put into the request's
    container (made now when the request names none, and named in `spec` for the pipeline), each
    once: a file already at its path (uploaded by an earlier turn, or changed by code since) is
    kept. The model reads where each one is. An unknown file is the request's 404."""
    spec.container = await containers.auto(owner, spec.container)
    present = set(await containers.workspace(owner, spec.container))
    for file_id, note in uploads:
        stored = await files.catalog.get_file(owner, file_id)
        if stored is None:
            raise APIError(404, f"container_upload: no file found with id '{file_id}'.", param="messages",
                           code="not_found")  # fmt: skip
        path = f"{WORKSPACE}/{stored.filename}"
        if path not in present:
            path = (await containers.add_file_id(owner, spec.container, file_id)).path
            present.add(path)
        note.text = f"[The user uploaded a file to the code execution container: {path}]"


# --- the answer's blocks --------------------------------------------------------------------

BASH_ERRORS = frozenset({"invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded",
                         "output_file_too_large"})  # fmt: skip
"""The `error_code`s of a `bash_code_execution_tool_result_error` (the SDK's beta types)."""
EDITOR_ERRORS = frozenset({"invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded",
                           "file_not_found"})  # fmt: skip
PYTHON_ERRORS = frozenset(
    {"invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded"}
)


def result_content(
    function: str, error: str | None, data: dict[str, Any], call: dict[str, Any]
) -> dict[str, Any]:
    """The `content` of a code call's result block, from what the call gave
    (`tools/code_execution.py`: its `data`, `error` when it failed) and its `input` (`call`).
    The files it wrote are output blocks naming their Containers API file ids."""
    files = [str(file["file_id"]) for file in data.get("files") or () if isinstance(file, dict)]
    code = str(data.get("error_code") or "unavailable")
    if function == "bash":
        if error is not None:
            return {"type": "bash_code_execution_tool_result_error",
                    "error_code": code if code in BASH_ERRORS else "unavailable"}  # fmt: skip
        return {"type": "bash_code_execution_result", "stdout": str(data.get("stdout") or ""),
                "stderr": str(data.get("stderr") or ""), "return_code": _return_code(data.get("exit_code")),
                "content": [{"type": "bash_code_execution_output", "file_id": file} for file in files]}  # fmt: skip
    if function == "python":
        if error is not None:
            return {"type": "code_execution_tool_result_error",
                    "error_code": code if code in PYTHON_ERRORS else "unavailable"}  # fmt: skip
        # The kernel's logs are what a notebook cell shows, streams and traceback in order.
        return {"type": "code_execution_result", "stdout": str(data.get("logs") or ""), "stderr": "",
                "return_code": 1 if data.get("error") else 0,
                "content": [{"type": "code_execution_output", "file_id": file} for file in files]}  # fmt: skip
    if error is not None:
        return {"type": "text_editor_code_execution_tool_result_error",
                "error_code": code if code in EDITOR_ERRORS else "unavailable", "error_message": error}  # fmt: skip
    command = data.get("command")
    if command == "view":
        return {"type": "text_editor_code_execution_view_result", "content": str(data.get("content") or ""),
                "file_type": "text", **{key: data[key] for key in ("num_lines", "start_line", "total_lines")
                                        if isinstance(data.get(key), int)}}  # fmt: skip
    if command == "create":
        return {
            "type": "text_editor_code_execution_create_result",
            "is_file_update": bool(data.get("is_file_update")),
        }
    # `insert` has no result type of its own: the lines added, as a hunk that replaced none.
    if command == "insert":
        added = str(call.get("new_str") or "").split("\n")
        line = call.get("insert_line") if isinstance(call.get("insert_line"), int) else 0
        return {"type": "text_editor_code_execution_str_replace_result", "old_start": line + 1, "old_lines": 0,
                "new_start": line + 1, "new_lines": len(added), "lines": added}  # fmt: skip
    return {"type": "text_editor_code_execution_str_replace_result",
            **{key: data[key] for key in ("old_start", "old_lines", "new_start", "new_lines", "lines") if key in data}}  # fmt: skip


def _return_code(exit_code: Any) -> int:
    """A command's exit code; one killed by a signal (no code) reads as the shell's 128+9."""
    return exit_code if isinstance(exit_code, int) else 137


# --- a replayed history -------------------------------------------------------------------


def replayed_call(block: dict[str, Any]) -> ToolCall | None:
    """A `server_tool_use` block of a code call as the call the model made (under the name it
    is offered: `python`, `bash_code_execution`, `text_editor_code_execution`); None for
    another server tool's."""
    function = FUNCTIONS.get(str(block.get("name")))
    if function is None or not isinstance(block.get("id"), str):
        return None
    arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
    return ToolCall(
        block["id"], CODE_FUNCTIONS[function], json.dumps(arguments, ensure_ascii=False)
    )


def is_result(block: dict[str, Any]) -> bool:
    return block.get("type") in RESULT_TYPES.values()


ERROR_TEXTS = {"execution_time_exceeded": "The call was stopped: it ran past the time limit.",
               "file_not_found": "There is no such file.", "invalid_tool_input": "Invalid input.",
               "too_many_requests": "Too many calls at once.", "output_file_too_large": "An output file is too large.",
               "unavailable": "Code execution is unavailable."}  # fmt: skip


def replayed_result(block: dict[str, Any], call: ToolCall) -> TextPart:
    """A code call's result block as the model read it (in the words of
    `tools/code_execution.py`), given the call it answers."""
    content = block.get("content") if isinstance(block.get("content"), dict) else {}
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = {}
    return TextPart(result_text(content, arguments if isinstance(arguments, dict) else {}))


def result_text(content: dict[str, Any], call: dict[str, Any]) -> str:
    """A result block's `content` as text: what a command or code printed and how it ended, a
    viewed file's numbered lines, an edit's outcome, or the error."""
    kind = str(content.get("type") or "")
    path = str(call.get("path") or "the file")
    if kind.endswith("_error"):
        code = str(content.get("error_code") or "unavailable")
        return f"Error: {content.get('error_message') or ERROR_TEXTS.get(code, code)}"
    if kind == "bash_code_execution_result":
        lines = [f"[{stream}]\n{str(content[stream]).rstrip()}" for stream in ("stdout", "stderr")
                 if content.get(stream)]  # fmt: skip
        return "\n".join([*lines, f"[exit code {content.get('return_code')}]"])
    if kind == "code_execution_result":
        text = "\n".join(
            str(content[stream]).rstrip() for stream in ("stdout", "stderr") if content.get(stream)
        )
        return text or (
            "The code failed."
            if content.get("return_code")
            else "The code ran and printed nothing."
        )
    if kind == "text_editor_code_execution_view_result":
        first = content.get("start_line") if isinstance(content.get("start_line"), int) else 1
        lines = str(content.get("content") or "").split("\n")
        return "\n".join(f"{first + n:6}\t{line}" for n, line in enumerate(lines))
    if kind == "text_editor_code_execution_create_result":
        return f"{'Updated' if content.get('is_file_update') else 'Created'} {path}."
    if kind == "text_editor_code_execution_str_replace_result" and call.get("command") == "insert":
        return f"Inserted {content.get('new_lines')} line(s) after line {call.get('insert_line')} of {path}."
    if kind == "text_editor_code_execution_str_replace_result":
        return f"Replaced the text at line {content.get('old_start')} of {path}."
    return json.dumps(content, ensure_ascii=False)
