"""The Responses API's built-in tools that the client runs, on open models: `shell` with a local
environment, `local_shell`, `apply_patch` (the JSON tool, not Codex's freeform one) and the
computer tools (`computer_use_preview`, `computer`) (docs/tools.md, "Client-executed built-in
tools").

The model sees each as a function (`offer`); its call becomes the typed item the client acts on
(`item`, coercing what a small model gets slightly wrong); a replayed item and its output reach
the model again as that call and its result (`call_arguments`, `output_text`, `screenshot`).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from ..canonical.conversation import FunctionTool
from ..canonical.ids import new_id

FUNCTIONS = {"shell": "shell", "local_shell": "local_shell", "apply_patch": "apply_patch",
             "computer_use_preview": "computer", "computer": "computer"}  # fmt: skip
"""Tool type -> the name of the function the model is offered it as."""
CALLS = {"shell_call": "shell", "local_shell_call": "local_shell", "apply_patch_call": "apply_patch",
         "computer_call": "computer_use_preview"}  # fmt: skip
"""Call item type -> the tool type it comes from (a computer call: either computer tool)."""
OUTPUTS = (
    "shell_call_output",
    "local_shell_call_output",
    "apply_patch_call_output",
    "computer_call_output",
)
_ITEM_TYPES = {"shell": ("shell_call", "sh"), "local_shell": ("local_shell_call", "lsh"),
               "apply_patch": ("apply_patch_call", "apc"), "computer_use_preview": ("computer_call", "cu"),
               "computer": ("computer_call", "cu")}  # fmt: skip


class MalformedCall(ValueError):
    """The model's arguments cannot be made into the tool's call item."""


def client_run(tool: dict[str, Any]) -> bool:
    """Whether the client runs this tool: a shell tool runs on the client only with a local
    environment (or none, which the Agents SDK sends as local); a container one is the server's."""
    kind = tool.get("type")
    if kind == "shell":
        environment = tool.get("environment")
        return environment is None or (
            isinstance(environment, dict) and environment.get("type") == "local"
        )
    return kind in FUNCTIONS


# --- what the model sees ------------------------------------------------------------------

_SHELL = {"type": "object", "properties": {
    "commands": {"type": "array", "items": {"type": "string"},
                 "description": "The command lines to run in order, each as you would type it in bash, "
                                "e.g. [\"ls -la\", \"python -m pytest -q\"]."},
    "timeout_ms": {"type": "integer", "description": "Optional time limit for the commands, in milliseconds."},
    "max_output_length": {"type": "integer",
                          "description": "Optional: the most characters of each command's output to return."}},
    "required": ["commands"]}  # fmt: skip
_LOCAL_SHELL = {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"},
                "description": "The program and its arguments, e.g. [\"bash\", \"-lc\", \"ls -la\"]."},
    "timeout_ms": {"type": "integer", "description": "Optional time limit, in milliseconds."},
    "working_directory": {"type": "string", "description": "Optional directory to run the command in."},
    "env": {"type": "object", "additionalProperties": {"type": "string"},
            "description": "Optional environment variables to set for the command."},
    "user": {"type": "string", "description": "Optional user to run the command as."}},
    "required": ["command"]}  # fmt: skip
_APPLY_PATCH = {"type": "object", "properties": {
    "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"],
             "description": "What to do with the file."},
    "path": {"type": "string", "description": "The file's path, relative to the working directory."},
    "diff": {"type": "string",
             "description": "For create_file: the new file's lines, each prefixed with `+`. For update_file: "
                            "the changes as V4A diff hunks: an optional `@@ line` naming the enclosing class or "
                            "function, then about three lines of unchanged context (prefixed with a space), "
                            "removed lines prefixed with `-`, added lines with `+`. Not used by delete_file."}},
    "required": ["type", "path"]}  # fmt: skip
_ACTIONS = [
    "click",
    "double_click",
    "drag",
    "keypress",
    "move",
    "screenshot",
    "scroll",
    "type",
    "wait",
]
_COMPUTER = {"type": "object", "properties": {
    "action": {"type": "string", "enum": _ACTIONS,
               "description": "click, double_click, move and scroll act at (x, y); drag follows `path`; "
                              "keypress presses `keys` together; type types `text`; screenshot only looks; "
                              "wait lets the screen settle."},
    "x": {"type": "integer", "description": "Horizontal pixel coordinate, from the left edge."},
    "y": {"type": "integer", "description": "Vertical pixel coordinate, from the top edge."},
    "button": {"type": "string", "enum": ["left", "right", "wheel", "back", "forward"],
               "description": "The mouse button of a click (left when not given)."},
    "keys": {"type": "array", "items": {"type": "string"},
             "description": "For keypress: the keys pressed together, e.g. [\"CTRL\", \"C\"]; for mouse "
                            "actions, keys held while acting."},
    "text": {"type": "string", "description": "For type: the text to type."},
    "path": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"},
                                                                        "y": {"type": "integer"}}},
             "description": "For drag: the points to drag through, from the first to the last."},
    "scroll_x": {"type": "integer", "description": "For scroll: pixels to scroll right (negative: left)."},
    "scroll_y": {"type": "integer", "description": "For scroll: pixels to scroll down (negative: up)."}},
    "required": ["action"]}  # fmt: skip


def offer(tool: dict[str, Any]) -> FunctionTool:
    """The function the model is offered for a client-run built-in tool."""
    kind = tool["type"]
    if kind == "shell":
        return FunctionTool("shell", "Runs shell commands on the user's machine, in its working directory, and "
                            "returns each one's stdout, stderr and exit code. Use it to look at files, run "
                            f"programs and tests.{_skills(tool.get('environment'))}", _SHELL)  # fmt: skip
    if kind == "local_shell":
        return FunctionTool("local_shell", "Runs one command on the user's machine and returns its output. To run "
                            "a command line, pass [\"bash\", \"-lc\", \"<command line>\"].", _LOCAL_SHELL)  # fmt: skip
    if kind == "apply_patch":
        return FunctionTool("apply_patch", "Creates, updates or deletes one file on the user's machine. Call it "
                            "once per file.", _APPLY_PATCH)  # fmt: skip
    size = ""
    if isinstance(tool.get("display_width"), int) and isinstance(tool.get("display_height"), int):
        size = f" The display is {tool['display_width']}x{tool['display_height']} pixels."
    environment = (
        f" It runs {tool['environment']}." if isinstance(tool.get("environment"), str) else ""
    )
    return FunctionTool("computer", "Acts on the user's computer screen with the mouse and the keyboard; a "
                        f"screenshot of the screen comes back after each action.{size}{environment}",
                        _COMPUTER)  # fmt: skip


def _skills(environment: Any) -> str:
    """The local skills a shell environment lists (`name`, `description`, `path`), told the model
    so that it reads one's instructions before using it."""
    skills = environment.get("skills") if isinstance(environment, dict) else None
    lines = [f"\n- {skill['name']}: {skill.get('description') or ''} ({skill['path']})"
             for skill in skills if isinstance(skill, dict) and isinstance(skill.get("name"), str)
             and isinstance(skill.get("path"), str)] if isinstance(skills, list) else []  # fmt: skip
    if not lines:
        return ""
    return (
        "\n\nSkills on this machine (read a skill's SKILL.md in its directory before using it):"
        + "".join(lines)
    )


# --- the call the client gets -------------------------------------------------------------


def item(kind: str, call_id: str, arguments: str) -> dict[str, Any]:
    """The call item of tool type `kind` the model's `arguments` stand for (without its status);
    `MalformedCall` when they cannot be made into one. Arguments that are no JSON object are
    taken as what a small model most likely meant: a command line, or a patch."""
    value = _json(arguments)
    item_type, prefix = _ITEM_TYPES[kind]
    call: dict[str, Any] = {"id": new_id(prefix), "type": item_type, "call_id": call_id}
    if kind == "shell":
        return {**call, "action": _shell_action(value), "environment": {"type": "local"}}
    if kind == "local_shell":
        return {**call, "action": _local_shell_action(value)}
    if kind == "apply_patch":
        return {**call, "operation": _operation(value)}
    action = _computer_action(value)
    if kind == "computer":  # the GA computer tool batches actions; one per call here
        return {**call, "actions": [action], "pending_safety_checks": []}
    return {**call, "action": action, "pending_safety_checks": []}


def _json(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def _shell_action(value: Any) -> dict[str, Any]:
    """`commands`: a list of command lines; one string is one command line, a `command` argv
    (a `local_shell` habit) is joined into one."""
    if isinstance(value, str):
        value = {"commands": [value]}
    if not isinstance(value, dict):
        raise MalformedCall("the arguments are not an object")
    commands = value.get("commands", value.get("command", value.get("cmd")))
    if isinstance(commands, str):
        commands = [commands]
    elif (
        isinstance(commands, list)
        and "commands" not in value
        and all(isinstance(c, str) for c in commands)
    ):
        commands = [shlex.join(commands)] if len(commands) > 1 else commands
    if (
        not isinstance(commands, list)
        or not commands
        or not all(isinstance(c, str) and c for c in commands)
    ):
        raise MalformedCall("`commands` is not a list of command lines")
    return {"commands": commands, "timeout_ms": _integer(value.get("timeout_ms")),
            "max_output_length": _integer(value.get("max_output_length"))}  # fmt: skip


def _local_shell_action(value: Any) -> dict[str, Any]:
    """`command`: an argv; a command line given as one string runs as `bash -lc` (what the
    model meant: pipes and quotes work)."""
    if isinstance(value, str):
        value = {"command": value}
    if not isinstance(value, dict):
        raise MalformedCall("the arguments are not an object")
    command = value.get("command", value.get("commands", value.get("cmd")))
    if (
        isinstance(command, list)
        and len(command) == 1
        and isinstance(command[0], str)
        and " " in command[0]
    ):
        command = command[0]
    if isinstance(command, str) and command.strip():
        command = ["bash", "-lc", command]
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise MalformedCall("`command` is not a list of strings")
    env = value.get("env")
    action: dict[str, Any] = {"type": "exec", "command": command,
                              "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
                              "timeout_ms": _integer(value.get("timeout_ms"))}  # fmt: skip
    for key in ("working_directory", "user"):
        action[key] = value[key] if isinstance(value.get(key), str) and value[key] else None
    return action


_OPERATIONS = {"create_file": "create_file", "create": "create_file", "add": "create_file",
               "add_file": "create_file", "update_file": "update_file", "update": "update_file",
               "edit": "update_file", "modify": "update_file", "delete_file": "delete_file",
               "delete": "delete_file", "remove": "delete_file"}  # fmt: skip
_ENVELOPE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$", re.MULTILINE)


def _operation(value: Any) -> dict[str, Any]:
    """One file operation: flat (`type`, `path`, `diff`) or under `operation`; a Codex-style
    `*** Begin Patch` envelope of one file is read too. A created file's lines the model did not
    prefix with `+` are prefixed."""
    if isinstance(value, dict) and isinstance(value.get("operation"), dict):
        value = value["operation"]
    if (
        isinstance(value, dict)
        and not value.get("type")
        and isinstance(value.get("patch") or value.get("input"), str)
    ):
        value = value.get("patch") or value.get("input")
    if isinstance(value, str):
        value = _envelope(value)
    if not isinstance(value, dict):
        raise MalformedCall("the arguments are not an object")
    kind = _OPERATIONS.get(str(value.get("type") or value.get("operation") or "").lower())
    path = value.get("path", value.get("file", value.get("file_path")))
    if kind is None:
        raise MalformedCall("`type` is not create_file, update_file or delete_file")
    if not isinstance(path, str) or not path.strip():
        raise MalformedCall("`path` is missing")
    if kind == "delete_file":
        return {"type": kind, "path": path}
    diff = value.get("diff", value.get("content", value.get("patch")))
    if not isinstance(diff, str):
        raise MalformedCall("`diff` is missing")
    lines = diff.splitlines()
    if kind == "create_file" and lines and not all(line.startswith("+") for line in lines):
        diff = "".join(f"+{line}\n" for line in lines)
    return {"type": kind, "path": path, "diff": diff}


def _envelope(text: str) -> dict[str, Any] | str:
    """The one file operation of a `*** Begin Patch` envelope (Codex's apply_patch format)."""
    headers = list(_ENVELOPE.finditer(text))
    if len(headers) != 1:
        return text
    header = headers[0]
    kind = {"Add": "create_file", "Update": "update_file", "Delete": "delete_file"}[header.group(1)]
    body = [line for line in text[header.end():].splitlines()
            if line.strip() and not line.startswith(("*** End Patch", "*** End of File"))]  # fmt: skip
    return {
        "type": kind,
        "path": header.group(2).strip(),
        "diff": "".join(f"{line}\n" for line in body),
    }


def _computer_action(value: Any) -> dict[str, Any]:
    """One action of the computer tool's shapes: flat (`action` and its fields) or nested
    (`action: {type, …}`); a click's button is left when not given, a keypress's keys may be one
    `ctrl+c` string, a scroll's missing axis is 0."""
    if not isinstance(value, dict):
        raise MalformedCall("the arguments are not an object")
    if isinstance(value.get("action"), dict):
        value = value["action"]
    elif (
        isinstance(value.get("actions"), list)
        and value["actions"]
        and isinstance(value["actions"][0], dict)
    ):
        value = value["actions"][0]
    kind = value.get("action", value.get("type"))
    kind = {"double click": "double_click", "doubleclick": "double_click", "key": "keypress",
            "mouse_move": "move", "type_text": "type"}.get(str(kind).lower(), str(kind).lower())  # fmt: skip
    if kind not in _ACTIONS:
        raise MalformedCall(f"`action` is not one of {', '.join(_ACTIONS)}")
    action: dict[str, Any] = {"type": kind}
    keys = value.get("keys")
    if isinstance(keys, str):
        keys = [key for key in re.split(r"\s*\+\s*", keys) if key]
    keys = [str(key) for key in keys] if isinstance(keys, list) else None
    if kind in ("click", "double_click", "move", "scroll"):
        action["x"], action["y"] = _point(value)
    if kind == "click":
        button = value.get("button")
        action["button"] = (
            button if button in ("left", "right", "wheel", "back", "forward") else "left"
        )
    if kind == "scroll":
        action["scroll_x"] = _integer(value.get("scroll_x")) or 0
        action["scroll_y"] = _integer(value.get("scroll_y")) or 0
    if kind == "drag":
        path = value.get("path")
        points = [_point(point) for point in path] if isinstance(path, list) else []
        if len(points) < 2:
            raise MalformedCall("a drag needs a `path` of at least two points")
        action["path"] = [{"x": x, "y": y} for x, y in points]
    if kind == "keypress":
        if not keys:
            raise MalformedCall("a keypress needs `keys`")
        action["keys"] = keys
    elif keys and kind in ("click", "double_click", "move", "scroll", "drag"):
        action["keys"] = keys
    if kind == "type":
        if not isinstance(value.get("text"), str):
            raise MalformedCall("a type action needs `text`")
        action["text"] = value["text"]
    return action


def _point(value: Any) -> tuple[int, int]:
    if isinstance(value, dict):
        x, y = _integer(value.get("x")), _integer(value.get("y"))
        if (
            x is None
            and isinstance(value.get("coordinate"), list)
            and len(value["coordinate"]) == 2
        ):
            x, y = (_integer(c) for c in value["coordinate"])
    elif isinstance(value, list) and len(value) == 2:
        x, y = (_integer(c) for c in value)
    else:
        x = y = None
    if x is None or y is None:
        raise MalformedCall("the action needs integer `x` and `y`")
    return x, y


# --- a replayed call and its output, as the model reads them --------------------------------


def call_arguments(item: dict[str, Any]) -> str:
    """A replayed call item as the arguments of the function the model called."""
    kind = item.get("type")
    if kind == "shell_call":
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        value = {key: action[key] for key in ("commands", "timeout_ms", "max_output_length")
                 if action.get(key) is not None}  # fmt: skip
    elif kind == "local_shell_call":
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        value = {key: action[key] for key in ("command", "timeout_ms", "working_directory", "env", "user")
                 if action.get(key)}  # fmt: skip
    elif kind == "apply_patch_call":
        value = item.get("operation") if isinstance(item.get("operation"), dict) else {}
    else:
        actions = (
            item.get("actions") if isinstance(item.get("actions"), list) else [item.get("action")]
        )
        actions = [action for action in actions if isinstance(action, dict)]
        value = _flat(actions[0]) if len(actions) == 1 else {"actions": actions}
    return json.dumps(value, ensure_ascii=False)


def _flat(action: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": action.get("type"),
        **{key: value for key, value in action.items() if key != "type"},
    }


def output_text(item: dict[str, Any]) -> str:
    """What the model reads of a replayed shell, local shell or patch output item (a computer
    call's is its screenshot: `screenshot`)."""
    kind = item.get("type")
    if kind == "shell_call_output":
        return _shell_output(item)
    if kind == "local_shell_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    if kind == "apply_patch_call_output":
        output = item.get("output") if isinstance(item.get("output"), str) else ""
        if item.get("status") == "failed":
            return f"Error: the patch was not applied. {output}".strip()
        return output or "The patch was applied."
    return ""


def _shell_output(item: dict[str, Any]) -> str:
    """Each command's stdout, stderr and outcome, in order."""
    chunks = []
    for position, output in enumerate(
        item.get("output") if isinstance(item.get("output"), list) else ()
    ):
        if not isinstance(output, dict):
            continue
        lines = [f"Command {position + 1}:"]
        for stream in ("stdout", "stderr"):
            text = output.get(stream)
            if isinstance(text, str) and text:
                lines.append(f"[{stream}]\n{text.rstrip()}")
        outcome = output.get("outcome") if isinstance(output.get("outcome"), dict) else {}
        if outcome.get("type") == "timeout":
            lines.append("[timed out]")
        elif outcome.get("type") == "exit":
            lines.append(f"[exit code {outcome.get('exit_code')}]")
        chunks.append("\n".join(lines))
    return "\n\n".join(chunks) or "The commands printed nothing."


def screenshot(item: dict[str, Any]) -> tuple[str, str | None] | None:
    """A computer call output's screenshot: its URL (or "") and its file id."""
    output = item.get("output") if isinstance(item.get("output"), dict) else {}
    url, file_id = output.get("image_url"), output.get("file_id")
    url = url if isinstance(url, str) and url else ""
    file_id = file_id if isinstance(file_id, str) and file_id else None
    return (url, file_id) if url or file_id else None
