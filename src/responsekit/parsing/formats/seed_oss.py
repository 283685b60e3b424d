"""`seed_oss`: ByteDance Seed-OSS-36B.

    <seed:think>…<seed:cot_budget_reflect>…</seed:cot_budget_reflect>…</seed:think>text
    <seed:tool_call>\\n<function=NAME>\\n<parameter=K>V</parameter>\\n</function>\\n</seed:tool_call>

One `<seed:tool_call>` block per call (several functions in one block are read too).
Unlike Qwen3-Coder there is no line break after `<parameter=K>`; one is stripped on each
side if present.  Values are bare text typed by the tool schema (`ArgsWriter`); the
template writes non-strings with Python's `str`, which the typing also reads (`True`,
`['a']`).  Budget-reflection tags are part of the reasoning and kept there.
"""

from __future__ import annotations

from responsekit.parsing.registry import register
from responsekit.parsing.xml_calls import XmlCallParser


@register
class SeedOssParser(XmlCallParser):
    """`<seed:think>` reasoning, content, then `<seed:tool_call><function=…>` blocks."""

    name = "seed_oss"
    reasoning_open = "<seed:think>"
    reasoning_close = "</seed:think>"
    stop_tokens = ("<seed:eos>",)
    call_markers = ("<seed:tool_call>",)
    block_close = "</seed:tool_call>"
    function_open = "<function="
    function_close = "</function>"
    param_open = "<parameter="
    param_close = "</parameter>"
