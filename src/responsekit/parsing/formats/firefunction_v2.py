"""`firefunction_v2`: llama-3-firefunction-v2.

    Some text functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {…}]

The marker is ` functools[` and its `[` opens the JSON array of calls; there is no
closing marker.  The space before it is whitespace around a call, dropped like any.
"""

from __future__ import annotations

from responsekit.parsing.formats.mistral_json_array import CallArrayParser
from responsekit.parsing.registry import register


@register
class FireFunctionV2Parser(CallArrayParser):
    """Content, then `functools[` and the calls; no reasoning."""

    name = "firefunction_v2"
    reasoning_open = None
    reasoning_close = None
    stop_tokens = ("<|eot_id|>", "<|end_of_text|>")
    call_markers = ("functools[",)
    marker_opens_array = True
