"""`qwen3_coder_xml`: Qwen3-Coder, Qwen3.5/3.6, Nemotron-3-Nano, Step-3.5-Flash.

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are bare text typed by the tool schema (`ArgsWriter`): exactly one newline is
stripped on each side, and a value ends only structurally (`\\n</parameter>`, or the next
`\\n<parameter=` / `\\n</function>` when `</parameter>` is missing), so markup such as
`</tool_call>` inside a value is kept.
"""

from __future__ import annotations

from responsekit.parsing.registry import register
from responsekit.parsing.xml_calls import XmlCallParser


@register
class Qwen3CoderXmlParser(XmlCallParser):
    """`<think>` reasoning, content, then `<tool_call><function=…>` XML blocks."""

    name = "qwen3_coder_xml"
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    call_markers = ("<tool_call>",)
    block_close = "</tool_call>"
    function_open = "<function="
    function_close = "</function>"
    param_open = "<parameter="
    param_close = "</parameter>"


_VALUE_ENDS = Qwen3CoderXmlParser.value_ends
"""The markers ending a value (the value lane's tests check its split against them)."""
