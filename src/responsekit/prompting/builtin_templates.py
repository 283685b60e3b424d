"""Built-in chat templates for GGUFs that carry none.

Base models and older conversions have no `tokenizer.chat_template`.  As llama.cpp does
(`llm_chat_detect_template` and its built-in formats in `src/llama-chat.cpp`), a format is
chosen from the model's architecture and the special tokens its vocabulary has: Gemma
turns for Gemma, Llama 3 headers, ChatML for Qwen and as the last resort, and so on.

Each is Hugging Face-style Jinja, rendered by `ChatTemplate` like a model's own.  None of
these formats has tool syntax, so earlier calls and their results are written as llama.cpp's
template polyfills (minja) write them for such templates: an assistant turn's calls as the
JSON `{"tool_calls": [...], "content": ...}`, a tool result as a user turn holding
`{"tool_response": {...}}`.  None writes BOS: the tokenizer adds it when the model's
`tokenizer.ggml.add_bos_token` asks for it (in-process and in llama.cpp's server alike), so
the prompt never starts with two.
"""

from __future__ import annotations

import re
from collections.abc import Collection

_TURN_TEXT = """\
{%- macro turn_text(message) -%}
{%- if message.role == 'tool' -%}
{{- {'tool_response': {'content': message.content, 'name': message.name,
                       'tool_call_id': message.tool_call_id}} | tojson(indent=2) -}}
{%- elif message.tool_calls -%}
{%- set calls = namespace(found=[]) -%}
{%- for call in message.tool_calls -%}
{%- set calls.found = calls.found + [{'name': call.function.name, 'arguments': call.function.arguments,
                                      'id': call.id}] -%}
{%- endfor -%}
{%- if message.content -%}
{{- {'tool_calls': calls.found, 'content': message.content} | tojson(indent=2) -}}
{%- else -%}
{{- {'tool_calls': calls.found} | tojson(indent=2) -}}
{%- endif -%}
{%- else -%}
{{- message.content -}}
{%- endif -%}
{%- endmacro -%}
"""
"""A message's text: its content, its calls as JSON, or a tool result as JSON."""

_GEMMA = """\
{%- set system = namespace(prefix='') -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system.prefix = messages[0].content | trim + '\\n\\n' -%}
{%- endif -%}
{%- for message in messages if message.role != 'system' -%}
{%- set role = 'model' if message.role == 'assistant' else 'user' -%}
{{- '<start_of_turn>' + role + '\\n' -}}
{%- if role == 'user' -%}
{{- system.prefix -}}
{%- set system.prefix = '' -%}
{%- endif -%}
{{- turn_text(message) | trim + '<end_of_turn>\\n' -}}
{%- endfor -%}
{%- if system.prefix -%}
{{- '<start_of_turn>user\\n' + system.prefix | trim + '<end_of_turn>\\n' -}}
{%- endif -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\\n' -}}
{%- endif -%}
"""
"""Gemma: `user` and `model` turns; no system role, so its text opens the first user turn
(as Gemma's own templates and llama.cpp do)."""

_LLAMA_3 = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + turn_text(message) | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
{%- endif -%}
"""

_LLAMA_4 = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|header_start|>' + role + '<|header_end|>\\n\\n' + turn_text(message) | trim + '<|eot|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|header_start|>assistant<|header_end|>\\n\\n' -}}
{%- endif -%}
"""

_CHATML = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|im_start|>' + role + '\\n' + turn_text(message) + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""

_PHI_3 = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|' + role + '|>\\n' + turn_text(message) + '<|end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|assistant|>\\n' -}}
{%- endif -%}
"""

_PHI_4 = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|im_start|>' + role + '<|im_sep|>' + turn_text(message) + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant<|im_sep|>' -}}
{%- endif -%}
"""

_ZEPHYR = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|' + role + '|>\\n' + turn_text(message) + '<|endoftext|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|assistant|>\\n' -}}
{%- endif -%}
"""

_COMMAND_R = """\
{%- set tokens = {'system': '<|SYSTEM_TOKEN|>', 'assistant': '<|CHATBOT_TOKEN|>'} -%}
{%- for message in messages -%}
{{- '<|START_OF_TURN_TOKEN|>' + tokens.get(message.role, '<|USER_TOKEN|>') + turn_text(message) | trim
    + '<|END_OF_TURN_TOKEN|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}
{%- endif -%}
"""

_GRANITE = """\
{%- for message in messages -%}
{%- set role = 'user' if message.role == 'tool' else message.role -%}
{{- '<|start_of_role|>' + role + '<|end_of_role|>' + turn_text(message) + '<|end_of_text|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_of_role|>assistant<|end_of_role|>' -}}
{%- endif -%}
"""

_DEEPSEEK_3 = """\
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{{- message.content + '\\n\\n' -}}
{%- elif message.role == 'assistant' -%}
{{- '<｜Assistant｜>' + turn_text(message) + '<｜end▁of▁sentence｜>' -}}
{%- else -%}
{{- '<｜User｜>' + turn_text(message) -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<｜Assistant｜>' -}}
{%- endif -%}
"""

_MISTRAL = """\
{%- set system = namespace(prefix='') -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system.prefix = messages[0].content + '\\n\\n' -%}
{%- endif -%}
{%- for message in messages if message.role != 'system' -%}
{%- if message.role == 'assistant' -%}
{{- ' ' + turn_text(message) + eos_token -}}
{%- else -%}
{{- '[INST] ' + system.prefix + turn_text(message) + '[/INST]' -}}
{%- set system.prefix = '' -%}
{%- endif -%}
{%- endfor -%}
"""
"""Mistral v1-v3: the system text opens the first `[INST]` (llama.cpp's `mistral-v3`);
the prompt ends with `[/INST]`, where the answer starts."""

_MISTRAL_V7 = """\
{%- for message in messages -%}
{%- if message.role == 'system' -%}
{{- '[SYSTEM_PROMPT]' + space + message.content + '[/SYSTEM_PROMPT]' -}}
{%- elif message.role == 'assistant' -%}
{{- space + turn_text(message) + eos_token -}}
{%- else -%}
{{- '[INST]' + space + turn_text(message) + '[/INST]' -}}
{%- endif -%}
{%- endfor -%}
"""
"""Mistral v7 (`[SYSTEM_PROMPT]`); its Tekken variant writes no spaces after the markers."""

_LLAMA_2 = """\
{%- set system = namespace(prefix='') -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system.prefix = '<<SYS>>\\n' + messages[0].content + '\\n<</SYS>>\\n\\n' -%}
{%- endif -%}
{%- for message in messages if message.role != 'system' -%}
{%- if message.role == 'assistant' -%}
{{- ' ' + turn_text(message) | trim + ' ' + eos_token -}}
{%- else -%}
{{- ('' if loop.first else bos_token) + '[INST] ' + system.prefix + turn_text(message) | trim + ' [/INST]' -}}
{%- set system.prefix = '' -%}
{%- endif -%}
{%- endfor -%}
"""
"""Llama 2 chat: `<<SYS>>` in the first `[INST]`; each later exchange opens with BOS, as
Meta's template writes it (the first BOS is the tokenizer's)."""

BUILTIN_TEMPLATES: dict[str, str] = {
    name: _TURN_TEXT + body
    for name, body in {
        "gemma": _GEMMA,
        "llama3": _LLAMA_3,
        "llama4": _LLAMA_4,
        "chatml": _CHATML,
        "phi3": _PHI_3,
        "phi4": _PHI_4,
        "zephyr": _ZEPHYR,
        "command-r": _COMMAND_R,
        "granite": _GRANITE,
        "deepseek3": _DEEPSEEK_3,
        "mistral": _MISTRAL,
        "mistral-v7": "{%- set space = ' ' -%}\n" + _MISTRAL_V7,
        "mistral-v7-tekken": "{%- set space = '' -%}\n" + _MISTRAL_V7,
        "llama2": _LLAMA_2,
    }.items()
}
"""The built-in templates by name (llama.cpp's names for the same formats)."""


def choose_template(architecture: str, tokens: Collection[str], *, tokenizer: str = "",
                    pre: str = "", name: str = "") -> str:  # fmt: skip
    """The built-in template for a model: `architecture` is `general.architecture`,
    `tokens` its vocabulary, `tokenizer` and `pre` its `tokenizer.ggml.model` and `.pre`,
    `name` its `general.name`.

    A vocabulary's turn markers are the surest sign (a fine-tune keeps its base's
    architecture but may bring the markers of another family); the architecture decides
    for vocabularies without any; ChatML is the last resort, as in llama.cpp.
    """

    def has(*markers: str) -> bool:
        return all(marker in tokens for marker in markers)

    if has("<start_of_turn>", "<end_of_turn>") or architecture.startswith("gemma"):
        return "gemma"
    if has("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"):
        return "llama3"
    if has("<|header_start|>", "<|header_end|>", "<|eot|>") or architecture == "llama4":
        return "llama4"
    if has("<|im_start|>", "<|im_sep|>", "<|im_end|>"):
        return "phi4"
    if has("<|im_start|>", "<|im_end|>") or architecture.startswith("qwen"):
        return "chatml"
    if has("<|user|>", "<|assistant|>", "<|end|>") or architecture == "phi3":
        return "phi3"
    if has("<|user|>", "<|assistant|>", "<|endoftext|>"):
        return "zephyr"
    if has("<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>") or architecture in ("command-r", "cohere2"):
        return "command-r"
    if has("<|start_of_role|>", "<|end_of_role|>") or architecture.startswith("granite"):
        return "granite"
    if has("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"):
        return "deepseek3"
    if has("[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]"):
        return "mistral-v7-tekken" if pre == "tekken" else "mistral-v7"
    if has("[INST]", "[/INST]") or re.search(r"mistral|mixtral", name, re.IGNORECASE):
        return "mistral"
    if architecture == "llama" and tokenizer == "llama":  # a SentencePiece Llama: Llama 2's
        return "llama2"
    return "chatml"
