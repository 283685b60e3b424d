"""`command_r7b`: c4ai-command-r7b-12-2024 (Command-A's Cohere2 template is alike).

    <|START_THINKING|>plan…<|END_THINKING|><|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>
    <|START_THINKING|>…<|END_THINKING|><|START_RESPONSE|>Hello<|END_RESPONSE|>

The call ids (`tool_call_id`) are kept.  The response and text markers only wrap the
content, so they are dropped like stop tokens.  Thinking is forced open only when the
prompt ends with `<|START_THINKING|>` (Cohere2's `reasoning` flag does that).
"""

from __future__ import annotations

from responsekit.parsing.formats.mistral_json_array import CallArrayParser
from responsekit.parsing.registry import register

_END_ACTION = "<|END_ACTION|>"


@register
class CommandR7BParser(CallArrayParser):
    """Thinking, content (bare or in a response block) and `<|START_ACTION|>` calls."""

    name = "command_r7b"
    reasoning_open = "<|START_THINKING|>"
    reasoning_close = "<|END_THINKING|>"
    open_anywhere = True
    stop_tokens = (
        "<|END_OF_TURN_TOKEN|>",
        "<|START_RESPONSE|>",
        "<|END_RESPONSE|>",
        "<|START_TEXT|>",
        "<|END_TEXT|>",
        _END_ACTION,
    )
    call_markers = ("<|START_ACTION|>",)
    name_keys = ("tool_name", "name")
    args_keys = ("parameters", "arguments")
    id_keys = ("tool_call_id", "id")
    await_id = True
    region_end = _END_ACTION
