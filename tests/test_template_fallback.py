"""GGUFs without a chat template: a built-in template is chosen from the model's
architecture and special tokens, renders every role, stops at the family's end of turn,
adds no second BOS, and `--chat-template` still replaces it; on tiny GGUFs of each family
and on the real Gemma 3 270M (a base model whose file has no template)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from responsekit.app import create_app
from responsekit.backends.completions import CompletionsUpstream
from responsekit.canonical.conversation import GenerationRequest, Message, TextPart, ToolCall
from responsekit.config import LocalModel, Settings, UpstreamConfig
from responsekit.prompting.builtin_templates import BUILTIN_TEMPLATES, choose_template
from responsekit.prompting.gguf_metadata import read_metadata
from responsekit.prompting.templates import (
    ChatTemplate,
    TemplateError,
    chat_messages,
    from_gguf,
    load_template,
)

from .conftest import EngineServer
from .harness import check_response, check_stream, read_sse, serve
from .tiny_gguf import FAMILIES, HERMES_TEMPLATE, write_tiny_gguf

SHORT = GenerationRequest(
    model="m",
    messages=[
        Message("system", [TextPart("Be brief.")]),
        Message("user", [TextPart("Hi")]),
        Message("assistant", [TextPart("Hello!")]),
        Message("user", [TextPart("Weather?")]),
    ],
)

RENDERED = {
    "gemma": "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
             "<start_of_turn>user\nWeather?<end_of_turn>\n<start_of_turn>model\n",
    "llama3": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n",
    "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
            "<|user|>\nWeather?<|end|>\n<|assistant|>\n",
    "phi4": "<|im_start|>system<|im_sep|>Be brief.<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|>"
            "<|im_start|>assistant<|im_sep|>Hello!<|im_end|><|im_start|>user<|im_sep|>Weather?<|im_end|>"
            "<|im_start|>assistant<|im_sep|>",
    "mistral": "[INST] Be brief.\n\nHi[/INST] Hello!</s>[INST] Weather?[/INST]",
    "mistral-v7": "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>[INST] Weather?[/INST]",
    "deepseek3": "Be brief.\n\n<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Weather?<｜Assistant｜>",
    "command-r": "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Weather?<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    "granite": "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
               "<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>\n"
               "<|start_of_role|>user<|end_of_role|>Weather?<|end_of_text|>\n"
               "<|start_of_role|>assistant<|end_of_role|>",
}  # fmt: skip
"""The short conversation in each family's built-in template, as the family writes it."""

END_OF_TURN = {
    "gemma": "<end_of_turn>", "llama3": "<|eot_id|>", "chatml": "<|im_end|>", "phi3": "<|end|>",
    "phi4": "<|im_end|>", "mistral": "</s>", "mistral-v7": "</s>", "deepseek3": "<｜end▁of▁sentence｜>",
    "command-r": "<|END_OF_TURN_TOKEN|>", "granite": "<|end_of_text|>",
}  # fmt: skip

CASES = [
    # (special tokens, general.architecture, the template chosen)
    ("gemma", "gemma3", "gemma"),
    ("gemma", "llama", "gemma"),  # the vocabulary decides
    ("plain", "gemma2", "gemma"),  # the architecture decides
    ("llama3", "llama", "llama3"),
    ("chatml", "qwen2", "chatml"),
    ("plain", "qwen3", "chatml"),
    ("phi3", "phi3", "phi3"),
    ("phi4", "phi3", "phi4"),  # Phi-4 keeps Phi-3's architecture, with ChatML-like markers
    ("mistral", "llama", "mistral"),
    ("mistral-v7", "llama", "mistral-v7"),
    ("deepseek3", "deepseek2", "deepseek3"),
    ("command-r", "command-r", "command-r"),
    ("granite", "granite", "granite"),
    ("plain", "llama", "chatml"),  # nothing to go by: the last resort
]


@pytest.mark.parametrize(("family", "architecture", "chosen"), CASES, ids=[f"{a}-{b}" for a, b, _ in CASES])
def test_a_gguf_without_a_template_gets_its_familys(family: str, architecture: str, chosen: str, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    path = write_tiny_gguf(tmp_path / "base.gguf", template=None, family=family, architecture=architecture,
                           name="Base Model 1B")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="responsekit.prompting.templates"):
        template = from_gguf(path)
    assert template.fallback == chosen
    assert template.source == BUILTIN_TEMPLATES[chosen]
    assert template.render_request(SHORT) == RENDERED[chosen]
    specials = FAMILIES[family]
    assert template.stops[0] == specials.eos  # the EOS, then the end of turn the template writes
    assert END_OF_TURN[chosen] in template.stops
    (record,) = caplog.records
    for said in ("base.gguf", "Base Model 1B", f"architecture {architecture}", f"built-in {chosen!r}", "--chat-template FILE"):
        assert said in record.getMessage()


def test_a_gguf_with_a_template_keeps_it(tiny_gguf: Path) -> None:
    template = from_gguf(tiny_gguf)
    assert template.fallback is None and template.source == HERMES_TEMPLATE


def test_the_metadata_reads_as_ggufs_own_reader_reads_it(tmp_path: Path) -> None:
    from gguf import GGUFReader

    path = write_tiny_gguf(tmp_path / "half.gguf", template=None, family="gemma", half=True)
    expected = {key: field.contents() for key, field in GGUFReader(str(path)).fields.items() if not key.startswith("GGUF.")}
    assert read_metadata(path) == expected
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(TemplateError, match="malformed GGUF metadata"):
        load_template(truncated)


@pytest.mark.parametrize(("architecture", "tokens", "options", "chosen"), [
    ("llama", {"<s>", "</s>"}, {"tokenizer": "llama"}, "llama2"),  # a SentencePiece Llama without markers
    ("llama", {"<s>", "</s>"}, {"tokenizer": "llama", "name": "Mistral-7B-v0.1"}, "mistral"),
    ("llama", {"[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"}, {"pre": "tekken"}, "mistral-v7-tekken"),
    ("llama4", set(), {}, "llama4"),
    ("stablelm", {"<|user|>", "<|assistant|>", "<|endoftext|>"}, {}, "zephyr"),
    ("cohere2", set(), {}, "command-r"),
    ("falcon", set(), {"tokenizer": "gpt2"}, "chatml"),
])  # fmt: skip
def test_the_choice_by_tokenizer_and_name(architecture: str, tokens: set[str], options: dict[str, str], chosen: str) -> None:
    assert choose_template(architecture, tokens, **options) == chosen


def test_llama2_and_the_mistral_variants_render_as_their_families_do() -> None:
    def render(name: str) -> str:
        return ChatTemplate(BUILTIN_TEMPLATES[name], bos_token="<s>", eos_token="</s>").render_request(SHORT)

    assert render("llama2") == "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Weather? [/INST]"
    assert render("mistral-v7-tekken") == "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][INST]Hi[/INST]Hello!</s>[INST]Weather?[/INST]"
    assert render("zephyr") == ("<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\nHello!"
                                "<|endoftext|>\n<|user|>\nWeather?<|endoftext|>\n<|assistant|>\n")  # fmt: skip
    assert render("llama4").endswith("<|header_start|>user<|header_end|>\n\nWeather?<|eot|><|header_start|>assistant<|header_end|>\n\n")


TOOLING = GenerationRequest(
    model="m",
    messages=[
        Message("system", [TextPart("Use tools.")]),
        Message("user", [TextPart("Weather in Paris and Rome?")]),
        Message("assistant", [TextPart("Looking.")], tool_calls=[
            ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
            ToolCall("call_2", "get_weather", '{"city": "Rome", "days": 2}'),
        ]),
        Message("tool", [TextPart("18 degrees")], tool_call_id="call_1"),
        Message("tool", [TextPart("21 degrees")], tool_call_id="call_2"),
        Message("assistant", [], tool_calls=[ToolCall("call_3", "get_time", "not json")]),
        Message("tool", [TextPart("noon")], tool_call_id="call_3"),
    ],
)  # fmt: skip


def _json_blocks(text: str, key: str) -> list[Any]:
    decoder = json.JSONDecoder()
    marker = '{\n  "' + key + '"'
    blocks, start = [], text.find(marker)
    while start >= 0:
        value, end = decoder.raw_decode(text, start)
        blocks.append(value)
        start = text.find(marker, end)
    return blocks


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_calls_and_results_are_written_as_llama_cpp_polyfills_them(name: str) -> None:
    """No built-in template has tool syntax: earlier calls are their JSON in the assistant's
    turn, results a user-side turn holding theirs (minja's polyfills); the system text and
    every turn are there."""
    template = ChatTemplate(BUILTIN_TEMPLATES[name], bos_token="<s>", eos_token="</s>")
    assert template.text_arguments is False
    prompt = template.render_request(TOOLING)
    assert "Use tools." in prompt and "Weather in Paris and Rome?" in prompt
    assert _json_blocks(prompt, "tool_calls") == [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"},
                        {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}, "id": "call_2"}],
         "content": "Looking."},
        {"tool_calls": [{"name": "get_time", "arguments": "not json", "id": "call_3"}]},
    ]  # fmt: skip
    assert _json_blocks(prompt, "tool_response") == [
        {"tool_response": {"content": "18 degrees", "name": "get_weather", "tool_call_id": "call_1"}},
        {"tool_response": {"content": "21 degrees", "name": "get_weather", "tool_call_id": "call_2"}},
        {"tool_response": {"content": "noon", "name": "get_time", "tool_call_id": "call_3"}},
    ]
    assert "<s>" not in prompt.replace("</s>", "") or name == "llama2"  # the tokenizer adds the first BOS


def test_gemma_turns_with_calls_and_a_lone_system_message() -> None:
    template = ChatTemplate(BUILTIN_TEMPLATES["gemma"], eos_token="<eos>")
    prompt = template.render_request(TOOLING)
    assert prompt.startswith("<start_of_turn>user\nUse tools.\n\nWeather in Paris and Rome?<end_of_turn>\n"
                             '<start_of_turn>model\n{\n  "tool_calls": [')  # fmt: skip
    assert prompt.count("<start_of_turn>user\n{\n  \"tool_response\"") == 3
    assert prompt.endswith('"tool_call_id": "call_3"\n  }\n}<end_of_turn>\n<start_of_turn>model\n')
    alone = template.render(chat_messages([Message("system", [TextPart("Be brief.")])]), add_generation_prompt=False)
    assert alone == "<start_of_turn>user\nBe brief.<end_of_turn>\n"


def test_the_completions_upstream_gets_the_same_fallback(tmp_path: Path) -> None:
    """`chat_template = "model.gguf"` for a raw-completions engine reads the file the same way."""
    path = write_tiny_gguf(tmp_path / "base.gguf", template=None, family="gemma")
    assert load_template(path).fallback == "gemma"
    config = UpstreamConfig(name="raw", base_url="http://127.0.0.1:9/v1", api="completions", chat_template=path)

    async def prompting() -> ChatTemplate:
        upstream = CompletionsUpstream(config)
        try:
            return (await upstream.prompting("base")).template
        finally:
            await upstream.aclose()

    template = asyncio.run(prompting())
    assert template.fallback == "gemma" and template.render_request(SHORT) == RENDERED["gemma"]


# --- in-process: a tiny Gemma-vocabulary model, and the real Gemma 3 270M ---------------


@pytest.fixture(scope="module")
def base_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A tiny model with Gemma's special tokens and no template, served twice: as it is,
    and with `--chat-template` replacing the built-in choice."""
    directory = tmp_path_factory.mktemp("base")
    model = write_tiny_gguf(directory / "base.gguf", template=None, family="gemma")
    override = directory / "override.jinja"
    override.write_text("{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}"
                        "<start_of_turn>model\n")  # fmt: skip
    settings = Settings(probe=False, data_dir=directory, database_url=f"sqlite:///{directory / 'state.db'}",
                        models=[LocalModel(path=model, name="base"),
                                LocalModel(path=model, name="overridden", chat_template=override)])  # fmt: skip
    app = create_app(settings)
    with serve(app) as url:
        yield EngineServer(url, app)


def _engines(server: EngineServer) -> dict[str, Any]:
    return {engine.model: engine for engine in server.app.state.router.engines}  # type: ignore[attr-defined]


def test_a_base_model_is_served_with_the_builtin_template(base_server: EngineServer) -> None:
    body = {"model": "base", "input": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "max_output_tokens": 16, "temperature": 0}  # fmt: skip
    answer = httpx.post(f"{base_server.base_url}/responses", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    response = answer.json()
    check_response(response)
    assert response["status"] == "incomplete" and response["usage"]["output_tokens"] == 16  # random weights run on
    with httpx.stream("POST", f"{base_server.base_url}/responses", json={**body, "stream": True}, timeout=60) as streamed:
        events, done = read_sse(streamed.iter_lines())
    assert done
    streamed_usage = check_stream(events)["usage"]
    assert (streamed_usage["input_tokens"], streamed_usage["output_tokens"]) == (response["usage"]["input_tokens"], 16)

    engine = _engines(base_server)["base"]
    assert engine.template.fallback == "gemma"
    prompt = "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    tokens = engine._sequences[0].tokenize(prompt)
    llama = engine._sequences[0].llama
    start, end = (llama.tokenize(marker.encode(), add_bos=False, special=True) for marker in ("<start_of_turn>", "<end_of_turn>"))
    assert len(start) == len(end) == 1
    assert tokens[0] == llama.token_bos() and tokens.count(llama.token_bos()) == 1  # the tokenizer's BOS, once
    assert tokens.count(start[0]) == 2 and tokens.count(end[0]) == 1
    assert response["usage"]["input_tokens"] == len(tokens)


def test_chat_template_replaces_the_builtin_choice(base_server: EngineServer) -> None:
    engine = _engines(base_server)["overridden"]
    assert engine.template.fallback is None
    assert engine.template.source.startswith("{% for m in messages %}")
    response = httpx.post(f"{base_server.base_url}/responses", timeout=60,
                          json={"model": "overridden", "input": "Hi", "max_output_tokens": 16}).json()  # fmt: skip
    check_response(response)
    assert response["usage"]["output_tokens"] == 16


def test_the_real_gemma_gguf_gets_gemma_turns_and_one_bos(gemma_gguf: Path) -> None:
    """Gemma 3 270M's file has no template: Gemma turns, whose markers are single special
    tokens, after exactly one BOS (the tokenizer's: the template writes none)."""
    from llama_cpp import Llama

    from responsekit.backends.llama_sequence import Sequence

    template = from_gguf(gemma_gguf)
    assert template.fallback == "gemma"
    assert template.stops == ("<eos>", "<end_of_turn>")
    prompt = template.render_request(TOOLING)
    sequence = Sequence(Llama(str(gemma_gguf), vocab_only=True, verbose=False))
    try:
        llama = sequence.llama
        tokens = sequence.tokenize(prompt)
        (start,) = llama.tokenize(b"<start_of_turn>", add_bos=False, special=True)
        (end,) = llama.tokenize(b"<end_of_turn>", add_bos=False, special=True)
        assert tokens[0] == llama.token_bos() and tokens.count(llama.token_bos()) == 1
        assert tokens.count(start) == prompt.count("<start_of_turn>") == 7
        assert tokens.count(end) == prompt.count("<end_of_turn>") == 6
        assert llama.detokenize(tokens[1:], special=True).decode() == prompt
    finally:
        sequence.close()

