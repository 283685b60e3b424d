"""Anthropic-defined client tools on open models: `bash_*`, `text_editor_*`, `computer_*` and
`memory_*` (docs/tools.md, "Client-executed built-in tools").

Claude knows their input schemas by training; an open model is offered each as a function with
that schema written out (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/overview,
the bash, text editor, computer use and memory tool pages), under the name the client gave it
(`bash`, `str_replace_based_edit_tool`, `computer`, `memory`), so its calls come back as the
ordinary `tool_use` blocks the client already runs, and their `tool_result`s read as any other.
"""

from __future__ import annotations

from typing import Any

from ...canonical.conversation import FunctionTool
from ...canonical.errors import APIError

_PREFIXES = ("bash_", "text_editor_", "computer_", "memory_")
_POINT = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}


def is_client_tool(tool: dict[str, Any]) -> bool:
    return str(tool.get("type") or "").startswith(_PREFIXES)


def client_tool(tool: dict[str, Any], param: str) -> FunctionTool:
    """The function an Anthropic-defined client tool is offered as (a version newer than those
    the `anthropic` SDK lists as its family's latest); a computer tool without its display size
    is the request's error (400)."""
    kind = str(tool["type"])
    version = kind.rsplit("_", 1)[-1]
    if kind.startswith("bash_"):
        function = _bash()
    elif kind.startswith("text_editor_"):
        function = _text_editor(undo=version in ("20241022", "20250124"))
    elif kind.startswith("computer_"):
        function = _computer(tool, version, param)
    else:
        function = _memory()
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise APIError(
            400, "Each tool needs a `name`.", param=f"{param}.name", code="invalid_value"
        )
    return FunctionTool(
        name, function.description, function.parameters, deferred=tool.get("defer_loading") is True
    )


def _bash() -> FunctionTool:
    return FunctionTool("bash", "Runs a command in a persistent bash session on the user's machine: the working "
                        "directory, variables and background processes carry over between calls. Returns what the "
                        "command printed.", {"type": "object", "properties": {
                            "command": {"type": "string", "description": "The bash command to run."},
                            "restart": {"type": "boolean",
                                        "description": "Set to true to restart the session (no command then)."}}})  # fmt: skip


def _text_editor(*, undo: bool) -> FunctionTool:
    commands = ["view", "create", "str_replace", "insert", *(["undo_edit"] if undo else [])]
    return FunctionTool("str_replace_based_edit_tool", "Views, creates and edits text files on the user's machine. "
                        "view shows a file with line numbers (or lists a directory); create writes a new file; "
                        "str_replace replaces old_str, which must occur exactly once, with new_str; insert puts "
                        "new_str after line insert_line (0: at the top)" + ("; undo_edit reverts the last edit of "
                        "the file." if undo else "."), {"type": "object", "properties": {
        "command": {"type": "string", "enum": commands, "description": "The command to run."},
        "path": {"type": "string", "description": "Absolute path of the file or directory."},
        "file_text": {"type": "string", "description": "For create: the content of the new file."},
        "old_str": {"type": "string", "description": "For str_replace: the exact text to replace."},
        "new_str": {"type": "string", "description": "For str_replace: the new text; for insert: the text to insert."},
        "insert_line": {"type": "integer", "description": "For insert: the line after which to insert."},
        "view_range": {**_POINT, "description": "For view: the first and last line to show (-1: to the end)."}},
        "required": ["command", "path"]})  # fmt: skip


_ACTIONS = {
    "20241022": ["key", "type", "mouse_move", "left_click", "left_click_drag", "right_click", "middle_click",
                 "double_click", "screenshot", "cursor_position"],
    "20250124": ["key", "hold_key", "type", "cursor_position", "mouse_move", "left_mouse_down", "left_mouse_up",
                 "left_click", "left_click_drag", "right_click", "middle_click", "double_click", "triple_click",
                 "scroll", "wait", "screenshot"],
}  # fmt: skip


def _computer(tool: dict[str, Any], version: str, param: str) -> FunctionTool:
    for key in ("display_width_px", "display_height_px"):
        value = tool.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise APIError(
                400,
                f"`{key}` must be a positive integer.",
                param=f"{param}.{key}",
                code="invalid_value",
            )
    actions = list(_ACTIONS.get(version, _ACTIONS["20250124"]))
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": actions, "description": "The action to perform."},
        "coordinate": {**_POINT, "description": "[x, y] in pixels from the top left: where to move, click or "
                                                "scroll, or where a drag ends."},
        "text": {"type": "string", "description": "For type: the text; for key: the key or combination in "
                                                  "xdotool syntax (\"Return\", \"ctrl+s\"); for clicks and scroll: "
                                                  "modifier keys to hold."},
    }  # fmt: skip
    if version != "20241022":
        properties |= {
            "start_coordinate": {**_POINT, "description": "For left_click_drag: where the drag starts."},
            "scroll_direction": {"type": "string", "enum": ["up", "down", "left", "right"]},
            "scroll_amount": {"type": "integer", "description": "For scroll: how many wheel clicks."},
            "duration": {"type": "number", "description": "For hold_key and wait: seconds."},
        }  # fmt: skip
    if version == "20251124" and tool.get("enable_zoom") is True:
        actions.append("zoom")
        properties["region"] = {"type": "array", "items": {"type": "integer"}, "minItems": 4, "maxItems": 4,
                                "description": "For zoom: [x1, y1, x2, y2], the part of the screen to view at "
                                               "full resolution."}  # fmt: skip
    display = f"{tool['display_width_px']}x{tool['display_height_px']} pixels"
    if isinstance(tool.get("display_number"), int):
        display += f", X11 display :{tool['display_number']}"
    return FunctionTool("computer", f"Uses the user's computer with the mouse and the keyboard (a display of {display}). "
                        "Take a screenshot to see the screen; each action's result comes back.",
                        {"type": "object", "properties": properties, "required": ["action"]})  # fmt: skip


def _memory() -> FunctionTool:
    return FunctionTool("memory", "Your memory: a directory of files under /memories that outlasts this "
                        "conversation. View it before starting a task; record what you learn, progress and "
                        "decisions as you go. view lists a directory or shows a file; create writes a file; "
                        "str_replace replaces old_str with new_str; insert puts insert_text after line "
                        "insert_line; delete removes a file or directory; rename moves old_path to new_path.",
                        {"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]},
        "path": {"type": "string", "description": "A path under /memories."},
        "file_text": {"type": "string", "description": "For create: the file's content."},
        "old_str": {"type": "string", "description": "For str_replace: the exact text to replace."},
        "new_str": {"type": "string", "description": "For str_replace: the new text."},
        "insert_line": {"type": "integer", "description": "For insert: the line after which to insert."},
        "insert_text": {"type": "string", "description": "For insert: the text to insert."},
        "view_range": {**_POINT, "description": "For view: the first and last line to show."},
        "old_path": {"type": "string", "description": "For rename: the current path."},
        "new_path": {"type": "string", "description": "For rename: the new path."}},
        "required": ["command"]})  # fmt: skip
