"""`functiongemma`: FunctionGemma (functiongemma-270m-it).

    <start_function_call>call:NAME{city:<escape>Paris<escape>,limit:5}<end_function_call>

Gemma 4's call syntax with other tokens: `<escape>` quotes strings (commas and colons
inside are text), and there is no reasoning.  Read by `GemmaArgs`.
"""

from __future__ import annotations

from responsekit.parsing.formats.gemma4 import GemmaCallParser
from responsekit.parsing.registry import register


@register
class FunctionGemmaParser(GemmaCallParser):
    """Content and `<start_function_call>call:…` calls."""

    name = "functiongemma"
    call_end = "<end_function_call>"
    quote = "<escape>"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<end_function_call>", "<start_function_response>", "<end_of_turn>", "<eos>")
    call_markers = ("<start_function_call>",)
