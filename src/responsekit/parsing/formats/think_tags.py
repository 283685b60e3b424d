"""`think_tags`: `<think>…</think>` reasoning, no tool calls (QwQ, R1 distills, Phi-4-reasoning)."""

from __future__ import annotations

from responsekit.parsing.registry import register
from responsekit.parsing.tagged import TaggedParser


@register
class ThinkTagsParser(TaggedParser):
    """Reasoning split at the first `</think>`; everything else is content."""

    name = "think_tags"
    stop_tokens = ("<|im_end|>", "<|endoftext|>", "<|end|>", "<|eot_id|>", "<｜end▁of▁sentence｜>")
