"""Pick the output format from the chat template's source, or from the model name.

Template rules are ordered: formats that share a marker are told apart by a more
specific one first (GLM and Qwen3-Coder before Hermes, which all use `<tool_call>`;
Seed-OSS before Qwen3-Coder; functionary v3.1 before Llama 3), as llama.cpp's
detection cascade does.  The rules cover the whole catalogue, including formats not
registered yet; `detect_format` only answers with registered ones.
"""

from __future__ import annotations

import re

from responsekit.parsing.registry import available_formats

# (format, markers that must all occur in the template source)
_TEMPLATE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt_oss_harmony", ("<|channel|>", "<|message|>")),
    ("deepseek_v4_dsml", ("｜DSML｜", "tool_calls>")),
    ("deepseek_v3_2_dsml", ("｜DSML｜",)),
    ("deepseek_r1", ("tool▁sep", "```json")),
    ("deepseek_v3_1", ("tool▁sep",)),
    ("kimi_k2", ("<|tool_calls_section_begin|>",)),
    ("minimax_m2", ("<minimax:tool_call>",)),
    ("seed_oss", ("<seed:",)),
    ("glm_4_7", ("</arg_key><arg_value>",)),
    ("glm_4_5", ("<arg_key>",)),
    ("qwen3_coder_xml", ("<function=", "<parameter=")),
    ("functionary_v3_1", ("<function=", "<|python_tag|>")),
    ("functionary_v3_2", (">>>",)),
    ("firefunction_v2", ("functools[",)),
    ("mistral_args", ("[TOOL_CALLS]", "[ARGS]")),
    ("mistral_json_array", ("[TOOL_CALLS]",)),
    ("command_r7b", ("<|START_ACTION|>",)),
    ("nemotron_toolcall", ("<TOOLCALL>",)),
    ("apertus", ("<|tools_prefix|>",)),
    ("lfm2_pythonic", ("<|tool_list_start|>",)),
    ("lfm2_pythonic", ("<|tool_call_start|>",)),
    ("lfm2_pythonic", ("List of tools: [",)),
    ("gemma4", ("<|tool_call>",)),
    ("functiongemma", ("<start_function_call>",)),
    ("phi4_mini", ("<|tool_call|>", "<|/tool_call|>")),
    ("granite_3", ("<|tool_call|>",)),
    ("llama4_pythonic", ("<|python_start|>",)),
    ("olmo3_pythonic", ("<function_calls>",)),
    ("llama3_json", ("<|python_tag|>",)),
    ("llama3_json", ('"parameters": ', "<|eot_id|>")),
    ("hermes_json", ("<tool_call>",)),
    ("think_tags", ("<think>",)),
)

# (format, pattern on the lower-cased model name), most specific first.
_MODEL_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fmt, re.compile(pattern))
    for fmt, pattern in (
        ("gpt_oss_harmony", r"gpt-oss"),
        ("deepseek_v4_dsml", r"deepseek-v4"),
        ("deepseek_v3_2_dsml", r"deepseek-v3\.2(?!-exp)"),
        ("deepseek_v3_1", r"deepseek-v3\.(1|2-exp)"),
        ("deepseek_r1", r"deepseek-(r1|v3-0324)"),
        ("qwen3_coder_xml", r"qwen3-coder|qwen3\.[56]|nemotron-3-nano|step-3\.5"),
        ("hermes_json", r"qwen|qwq|hermes|smollm3|granite-4"),
        ("mistral_args", r"magistral|devstral|ministral-3|mistral-small-3\.2|mistral-large-3"),
        ("mistral_json_array", r"mistral|mixtral|ministral"),
        ("glm_4_7", r"glm-(4\.7|5)"),
        ("glm_4_5", r"glm-4\.[56]"),
        ("kimi_k2", r"kimi-k2"),
        ("minimax_m2", r"minimax-m2"),
        ("seed_oss", r"seed-oss"),
        ("nemotron_toolcall", r"nemotron"),
        ("apertus", r"apertus"),
        ("lfm2_pythonic", r"lfm2"),
        ("functiongemma", r"functiongemma"),
        ("gemma4", r"gemma-4"),
        ("phi4_mini", r"phi-4-mini"),
        ("think_tags", r"phi-4-reasoning|r1-distill"),
        ("xlam", r"xlam"),
        ("pythonic", r"toolace|gemma-3"),  # before Llama 3: ToolACE-2-Llama-3.1-8B
        ("generic_json", r"gemma-2|phi-3\.5"),  # no native tools: llama.cpp's fallback
        ("llama4_pythonic", r"llama-4"),
        ("firefunction_v2", r"firefunction"),  # before Llama 3: llama-3-firefunction-v2
        ("llama3_json", r"llama-3"),
        ("command_r7b", r"command-(r7b|a)"),
        ("granite_3", r"granite-3"),
        ("olmo3_pythonic", r"olmo-3"),
        ("functionary_v3_2", r"functionary.*v3\.2"),
        ("functionary_v3_1", r"functionary"),
    )
)


def template_format(template: str) -> str | None:
    """The catalogue format whose markers the template source contains."""
    for fmt, markers in _TEMPLATE_RULES:
        if all(m in template for m in markers):
            return fmt
    return None


def model_format(model: str) -> str | None:
    """The catalogue format a model name suggests."""
    name = model.lower()
    for fmt, pattern in _MODEL_RULES:
        if pattern.search(name):
            return fmt
    return None


def detect_format(template: str | None = None, model: str | None = None) -> str | None:
    """The registered format for a chat template (preferred) or model name, or None."""
    registered = set(available_formats())
    for found in (
        template_format(template) if template else None,
        model_format(model) if model else None,
    ):
        if found in registered:
            return found
    return None
