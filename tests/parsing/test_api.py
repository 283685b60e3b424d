"""The package interface: registry, detection, thinking-open, reasoning modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from responsekit.canonical.events import Finish, ReasoningDelta, TextDelta, ToolCallStart
from responsekit.parsing import (
    Parser,
    ReasoningFilter,
    available_formats,
    detect_format,
    get_parser,
)
from responsekit.parsing import detect as detect_module
from responsekit.parsing.detect import model_format, template_format

from .parsing_support import TEMPLATES_DIR

# Template file → format (docs/parsing.md, *The corpus*); uncatalogued templates are left out.
TEMPLATE_FORMATS = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes_json",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes_json",
    "Qwen-Qwen2.5-7B-Instruct": "hermes_json",
    "Qwen-Qwen3-0.6B": "hermes_json",
    "Qwen-QwQ-32B": "hermes_json",
    "ibm-granite-granite-4.0": "hermes_json",
    "ibm-granite-granite-4.1": "hermes_json",
    "MiMo-VL": "hermes_json",
    "HuggingFaceTB-SmolLM3-3B": "think_tags",
    "Qwen3-Coder": "qwen3_coder_xml",
    "Qwen3.5-4B": "qwen3_coder_xml",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3_coder_xml",
    "stepfun-ai-Step-3.5-Flash": "qwen3_coder_xml",
    "StepFun3.5-Flash": "qwen3_coder_xml",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral_json_array",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_args",
    "unsloth-mistral-Devstral-Small-2507": "mistral_args",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral_args",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3_json",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3_json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3_json",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek_r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek_r1",
    "llama-cpp-deepseek-r1": "deepseek_r1",
    "deepseek-ai-DeepSeek-V3.1": "deepseek_v3_1",
    "deepseek-ai-DeepSeek-V3.2": "deepseek_v3_2_dsml",
    "deepseek-ai-DeepSeek-V4": "deepseek_v4_dsml",
    "meetkai-functionary-medium-v3.1": "functionary_v3_1",
    "meetkai-functionary-medium-v3.2": "functionary_v3_2",
    "fireworks-ai-llama-3-firefunction-v2": "firefunction_v2",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r7b",
    "Cohere2MoE": "command_r7b",
    "ibm-granite-granite-3.3-2B-Instruct": "granite_3",
    "openai-gpt-oss-120b": "gpt_oss_harmony",
    "glm_4_5": "glm_4_5",
    "GLM-4.6": "glm_4_5",
    "GLM-4.7-Flash": "glm_4_7",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "moonshotai-Kimi-K2": "kimi_k2",
    "MiniMax-M2": "minimax_m2",
    "ByteDance-Seed-OSS": "seed_oss",
    "NVIDIA-Nemotron-Nano-v2": "nemotron_toolcall",
    "nvidia-Llama-3_3-Nemotron-Super-49B-v1_5": "nemotron_toolcall",
    "Apertus-8B-Instruct": "apertus",
    "llama-cpp-lfm2": "lfm2_pythonic",
    "LFM2-8B-A1B": "lfm2_pythonic",
    "LFM2.5-8B-A1B": "lfm2_pythonic",
    "LFM2.5-Instruct": "lfm2_pythonic",
    "llama-cpp-microsoft-Phi-4-mini-instruct": "phi4_mini",
    "google-gemma-4-31B-it": "gemma4",
    "google-gemma-4-31B-it-interleaved": "gemma4",
    "gemma4": "gemma4",
}


def _template(name: str) -> str:
    return (TEMPLATES_DIR / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.mark.parametrize(("name", "fmt"), sorted(TEMPLATE_FORMATS.items()))
def test_template_markers_identify_the_catalogued_format(name: str, fmt: str) -> None:
    assert template_format(_template(name)) == fmt


def test_detect_format_answers_only_with_registered_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    assert detect_format(_template("Qwen3-Coder")) == "qwen3_coder_xml"
    assert detect_format(_template("GLM-4.6")) == "glm_4_5"
    # A catalogued format without a parser is not an answer; the model name is tried next.
    registered = [fmt for fmt in detect_module.available_formats() if fmt != "glm_4_5"]
    monkeypatch.setattr(detect_module, "available_formats", lambda: registered)
    assert detect_format(_template("GLM-4.6")) is None
    assert detect_format(_template("GLM-4.6"), model="Qwen/QwQ-32B") == "hermes_json"
    assert detect_format() is None


@pytest.mark.parametrize(
    ("model", "fmt"),
    [
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder_xml"),
        ("Qwen/Qwen3.5-4B", "qwen3_coder_xml"),
        ("Qwen/Qwen3-8B", "hermes_json"),
        ("openai/gpt-oss-120b", "gpt_oss_harmony"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek_r1"),
        ("deepseek-ai/DeepSeek-V3.2", "deepseek_v3_2_dsml"),
        ("deepseek-ai/DeepSeek-V4-Flash", "deepseek_v4_dsml"),
        ("mistralai/Magistral-Small-2509", "mistral_args"),
        ("mistralai/Mistral-Nemo-Instruct-2407", "mistral_json_array"),
        ("zai-org/GLM-4.7-Flash", "glm_4_7"),
        ("some/unknown-model", None),
    ],
)
def test_model_names(model: str, fmt: str | None) -> None:
    assert model_format(model) == fmt


def test_get_parser_and_available_formats() -> None:
    names = available_formats()
    assert names == sorted(names)
    assert {
        "think_tags",
        "hermes_json",
        "qwen3_coder_xml",
        "deepseek_r1",
        "mistral_args",
        "gpt_oss_harmony",
    } <= set(names)
    for name in names:
        cls = get_parser(name)
        assert issubclass(cls, Parser) and cls.name == name
    with pytest.raises(ValueError, match="hermes_json"):
        get_parser("no_such_format")


@pytest.mark.parametrize(
    ("fmt", "prompt", "is_open"),
    [
        ("hermes_json", "<|im_start|>assistant\n<think>\n", True),
        ("hermes_json", "<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("hermes_json", "<|im_start|>assistant\n", False),
        ("deepseek_r1", "<｜Assistant｜><think>\n", True),
        ("qwen3_coder_xml", "<|im_start|>assistant\n<think>\n", True),
        ("mistral_args", "[/INST][THINK]", True),
        ("mistral_args", "[/INST]", False),
        ("gpt_oss_harmony", "<|start|>assistant", False),
        ("gpt_oss_harmony", "<|start|>assistant<|channel|>analysis<|message|>", True),
    ],
)
def test_thinking_open_is_decided_from_the_prompt(fmt: str, prompt: str, is_open: bool) -> None:
    assert get_parser(fmt).thinking_open_in(prompt) is is_open


def test_thinking_open_with_a_real_rendered_prompt_suffix() -> None:
    # Qwen3.5's generation prompt, as its template renders it with thinking enabled.
    assert "'<think>\\n'" in _template("Qwen3.5-4B")
    assert get_parser("qwen3_coder_xml").thinking_open_in("<|im_start|>assistant\n<think>\n")


EVENTS = [ReasoningDelta("plan"), ReasoningDelta(" more"), TextDelta("answer"), Finish("stop")]


def test_reasoning_separate_passes_through() -> None:
    assert ReasoningFilter("separate")(EVENTS) == EVENTS


def test_reasoning_none_drops_it() -> None:
    assert ReasoningFilter("none")(EVENTS) == [TextDelta("answer"), Finish("stop")]


def test_reasoning_inline_wraps_it_in_think_tags_across_batches() -> None:
    f = ReasoningFilter("inline")
    out = f(EVENTS[:1]) + f(EVENTS[1:2]) + f([ToolCallStart(0, "c", "x")]) + f.finish()
    text = "".join(e.text for e in out if isinstance(e, TextDelta))
    assert text == "<think>\nplan more\n</think>\n\n"
    assert isinstance(out[-1], ToolCallStart)
    g = ReasoningFilter("inline")
    assert "".join(e.text for e in g(EVENTS[:1]) + g.finish()) == "<think>\nplan\n</think>\n\n"


def test_unknown_reasoning_mode_is_rejected() -> None:
    with pytest.raises(ValueError):
        ReasoningFilter("hidden")  # type: ignore[arg-type]


def test_templates_copied_into_the_repo() -> None:
    assert len(list(Path(TEMPLATES_DIR).glob("*.jinja"))) == 69
