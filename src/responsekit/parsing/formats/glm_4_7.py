"""`glm_4_7`: GLM-4.7, 4.7-Flash, GLM-5.

    The user wants…</think>text<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>

GLM-4.5's call syntax without the line breaks, which the GLM-4.5 reader already accepts.
What differs is the prompt: it ends with `<think>` when thinking is on (forced open,
decided by `thinking_open_in`) and with `</think>` when it is off.
"""

from __future__ import annotations

from responsekit.parsing.formats.glm_4_5 import Glm45Parser
from responsekit.parsing.registry import register


@register
class Glm47Parser(Glm45Parser):
    """GLM-4.5's parser under its own name: same markers, no line breaks."""

    name = "glm_4_7"
