"""`nemotron_toolcall`: Nemotron-Nano-9B/12B-v2, Llama-3.3-Nemotron-Super-49B-v1.5,
Llama-3.1-Nemotron-Nano-8B.

    …</think>Some text<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>

Nano-v2's template opens `<think>\\n` in the prompt (`<think></think>` with /no_think).
The templates show `"arguments"` as a string, so double-encoded arguments are common;
`JsonCallReader` decodes them.  Text after `</TOOLCALL>` is content (llama.cpp).
"""

from __future__ import annotations

from responsekit.parsing.formats.mistral_json_array import CallArrayParser
from responsekit.parsing.registry import register

_END = "</TOOLCALL>"


@register
class NemotronToolcallParser(CallArrayParser):
    """`<think>` reasoning, content, then a JSON call array in `<TOOLCALL>` tags."""

    name = "nemotron_toolcall"
    stop_tokens = ("<SPECIAL_12>", "<|eot_id|>", _END)
    call_markers = ("<TOOLCALL>",)
    region_end = _END
