"""`minimax_m2`: MiniMax-M2, M2.1, M2.5.

    …reasoning\\n</think>\\n\\ntext\\n<minimax:tool_call>\\n<invoke name="NAME">
    <parameter name="K">V</parameter>\\n</invoke>\\n</minimax:tool_call>

The prompt ends with `<think>\\n`, so reasoning is forced open.  Values are bare text
typed by the tool schema (`ArgsWriter`), with one line break stripped on each side
(SGLang); a missing `</parameter>` is tolerated before the next `\\n<parameter` or
`\\n</invoke>`.  Names are read from the `name="…"` attribute.
"""

from __future__ import annotations

from responsekit.parsing.registry import register
from responsekit.parsing.xml_calls import XmlCallParser


def _attribute(text: str) -> str:
    """`"get_weather"` (or `'…'`, or bare) → `get_weather`."""
    return text.strip().strip("\"'").strip()


@register
class MiniMaxM2Parser(XmlCallParser):
    """`<think>` reasoning (forced open), content, then `<minimax:tool_call>` blocks."""

    name = "minimax_m2"
    stop_tokens = ("[e~[",)
    call_markers = ("<minimax:tool_call>",)
    block_close = "</minimax:tool_call>"
    function_open = "<invoke name="
    function_close = "</invoke>"
    param_open = "<parameter name="
    param_close = "</parameter>"

    def _call_name(self, header: str) -> str:
        return _attribute(header)

    def _param_name(self, header: str) -> str:
        return _attribute(header)
