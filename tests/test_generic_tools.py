"""Tool calls for models whose chat template has no tool syntax: the tools
and a JSON protocol go in the system message, a grammar makes the output one JSON object of
calls (or, with `auto`, of the answer), and the `generic_json` parser reads it back.

On the real Gemma 3 270M base model and on the tiny random model, each with a template that
never reads `tools`, in-process; and through a raw `/completions` engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from responsekit.app import create_app
from responsekit.backends import generic_tools
from responsekit.backends.model_prompting import ModelPrompting, Plan
from responsekit.canonical.conversation import (
    FunctionTool,
    GenerationRequest,
    Message,
    TextPart,
    ToolCall,
)
from responsekit.config import LocalModel, Settings, UpstreamConfig
from responsekit.prompting.templates import ChatTemplate

from .conftest import EngineServer
from .harness import check_response, check_stream, read_sse, serve
from .test_completions_backend import ScriptedCompletions
from .test_llama_cpp import ANSWER_SCHEMA, TOOLS, WEATHER_SCHEMA
from .tiny_gguf import write_tiny_gguf

TEMPLATES = Path(__file__).parent / "data" / "formats" / "templates"

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")  # fmt: skip
"""ChatML without tools, for the tiny model (whose vocabulary has ChatML's tokens)."""

GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- set role = "model" if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\\n' }}
{%- endif -%}
"""
"""Gemma 3's chat template (text only): a system message goes into the first user turn,
roles must alternate, and nothing reads `tools`."""

SCHEMAS = {tool["name"]: tool["parameters"] for tool in TOOLS}


def serve_models(directory: Path, *models: LocalModel) -> Iterator[EngineServer]:
    settings = Settings(probe=False, data_dir=directory, database_url=f"sqlite:///{directory / 's.db'}",
                        models=list(models))  # fmt: skip
    app = create_app(settings)
    with serve(app) as url:
        yield EngineServer(url, app)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """The tiny random model with a ChatML template that never reads `tools`."""
    directory = tmp_path_factory.mktemp("tiny-toolless")
    yield from serve_models(directory, LocalModel(path=write_tiny_gguf(directory / "tiny.gguf", template=CHATML)))


@pytest.fixture(scope="module")
def gemma(gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """Gemma 3 270M with the built-in Gemma template chosen for it (the GGUF has none)."""
    directory = tmp_path_factory.mktemp("gemma")
    yield from serve_models(directory, LocalModel(path=gemma_gguf, name="gemma"))


def respond(server: EngineServer, streaming: bool, **body: Any) -> dict[str, Any]:
    """A checked Response, streamed (its events validated) or not."""
    payload = {"temperature": 0, **body}
    if not streaming:
        answer = httpx.post(f"{server.base_url}/responses", json=payload, timeout=120)
        assert answer.status_code == 200, answer.text
        check_response(answer.json())
        return answer.json()
    with httpx.stream("POST", f"{server.base_url}/responses", json={**payload, "stream": True}, timeout=120) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    return check_stream(events)


def valid_calls(response: dict[str, Any], tools: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The response's function calls, each checked against its tool's schema."""
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    for call in calls:
        jsonschema.validate(json.loads(call["arguments"]), tools[call["name"]])
    return calls


# --- when the protocol applies, and what the prompt says --------------------------------


def test_a_name_suggested_format_is_not_used_for_a_template_without_tool_syntax() -> None:
    # gemma-3 suggests `pythonic`, but this template writes no calls: answers are text, and calls
    # come only through the generic protocol.
    prompting = ModelPrompting("gemma-3-270m", ChatTemplate(GEMMA3))
    assert prompting.generic_tools and prompting.format is None and prompting.parser is None
    configured = ModelPrompting("gemma-3-270m", ChatTemplate(GEMMA3), parser="pythonic")
    assert configured.format == "pythonic" and not configured.generic_tools


def test_templates_without_tool_syntax_take_the_generic_protocol() -> None:
    def applies(name: str, parser: str | None = None) -> bool:
        return generic_tools.applies(ChatTemplate((TEMPLATES / f"{name}.jinja").read_text()), parser)

    assert applies("google-gemma-2-2b-it") and applies("microsoft-Phi-3.5-mini-instruct")
    assert generic_tools.applies(ChatTemplate(GEMMA3), None) and generic_tools.applies(ChatTemplate(CHATML), "auto")
    for native in ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "Qwen3-Coder", "meta-llama-Llama-3.1-8B-Instruct",
                   "google-gemma-4-31B-it", "mistralai-Mistral-Nemo-Instruct-2407"):  # fmt: skip
        assert not applies(native), native
    assert not applies("google-gemma-2-2b-it", "hermes_json")  # a configured format wins
    assert applies("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "generic_json")


def test_the_prompt_describes_the_tools_and_writes_the_history_as_json() -> None:
    """Gemma 2's template refuses a system message and wants roles to alternate: the system
    text goes into the first user turn, two results and the next question make one turn."""
    weather = FunctionTool("get_weather", "Weather of a city", WEATHER_SCHEMA)
    request = GenerationRequest(model="m", tools=[weather], tool_choice="required", parallel_tool_calls=False, messages=[
        Message("system", [TextPart("Be brief.")]),
        Message("user", [TextPart("Paris and Rome?")]),
        Message("assistant", [], tool_calls=[ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
                                             ToolCall("call_2", "get_weather", '{"city": "Rome"}')]),
        Message("tool", [TextPart("18 degrees")], tool_call_id="call_1"),
        Message("tool", [TextPart("21 degrees")], tool_call_id="call_2"),
        Message("user", [TextPart("And tomorrow?")]),
    ])  # fmt: skip
    template = ChatTemplate((TEMPLATES / "google-gemma-2-2b-it.jinja").read_text(), bos_token="<bos>")
    assert not template.takes_system
    plan = ModelPrompting("m", template).plan(request)
    assert isinstance(plan, Plan) and plan.grammar is not None and not plan.grammar.lazy
    head, history = plan.prompt.split("Paris and Rome?<end_of_turn>\n")
    assert head.startswith("<bos><start_of_turn>user\nBe brief.\n\nYou can call these tools")
    assert '"name": "get_weather"' in head and '"maximum": 14' in head and '"enum": [' in head
    assert head.endswith('{"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}}\n\n')
    assert history == (
        "<start_of_turn>model\n"
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_weather", "arguments": {"city": "Rome"}}]}<end_of_turn>\n'
        "<start_of_turn>user\n"
        '{"tool_response": {"tool": "get_weather", "content": "18 degrees"}}\n\n'
        '{"tool_response": {"tool": "get_weather", "content": "21 degrees"}}\n\n'
        "And tomorrow?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    # Without tools offered, the history is written the same way and nothing is described.
    request.tools = []
    plain = ModelPrompting("m", template).plan(request)
    assert isinstance(plain, Plan) and plain.grammar is None
    assert plain.prompt.startswith("<bos><start_of_turn>user\nBe brief.\n\nParis and Rome?") and history in plain.prompt


# --- the tiny model: the grammar alone makes the calls --------------------------------


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_required_forces_a_call_that_validates(tiny: EngineServer, streaming: bool) -> None:
    # One call: the random model never ends its turn, so it would add parallel calls to the limit.
    response = respond(tiny, streaming, model="tiny", input="Weather in Paris?", tools=TOOLS,
                       tool_choice="required", parallel_tool_calls=False, max_output_tokens=200)  # fmt: skip
    assert response["status"] == "completed"
    (call,) = valid_calls(response, SCHEMAS)
    assert response["output"] == [call]


def test_a_named_function_is_the_one_called_after_earlier_calls(tiny: EngineServer) -> None:
    """A chained turn: the earlier call and its result render in the protocol's JSON."""
    first = respond(tiny, False, model="tiny", input="Time?", tools=TOOLS, parallel_tool_calls=False,
                    tool_choice={"type": "function", "name": "get_time"}, max_output_tokens=100)  # fmt: skip
    (earlier,) = valid_calls(first, SCHEMAS)
    result = {"type": "function_call_output", "call_id": earlier["call_id"], "output": "12:00"}
    second = respond(tiny, True, model="tiny", input=[{"role": "user", "content": "Time?"}, earlier, result],
                     tools=TOOLS, tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
                     max_output_tokens=200)  # fmt: skip
    (call,) = valid_calls(second, SCHEMAS)
    assert earlier["name"] == "get_time" and call["name"] == "get_weather"
    arguments = json.loads(call["arguments"])
    assert 1 <= arguments["days"] <= 14 and -40 <= arguments["offset"] <= 250


def test_auto_answers_or_calls_and_json_output_still_validates(tiny: EngineServer) -> None:
    """With `auto` the object holds calls or a response (random weights never end a free
    string: the answer is cut, but well-formed); `text.format` alone is the existing path."""
    response = respond(tiny, True, model="tiny", input="Hi", tools=TOOLS, parallel_tool_calls=False,
                       max_output_tokens=30)  # fmt: skip
    assert response["status"] in ("completed", "incomplete")
    assert valid_calls(response, SCHEMAS) or response["output_text"]
    text = {"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    answer = respond(tiny, False, model="tiny", input="Answer in JSON.", text=text, max_output_tokens=200)
    assert answer["status"] == "completed"
    jsonschema.validate(json.loads(answer["output_text"]), ANSWER_SCHEMA)


# --- the real Gemma 3 270M base model --------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_gemma_required_and_named_calls_validate(gemma: EngineServer, streaming: bool) -> None:
    # One call each: a base model that may call tools in parallel keeps adding calls.
    required = respond(gemma, streaming, model="gemma", input="What's the weather in Paris for three days?",
                       tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_output_tokens=60)  # fmt: skip
    assert required["status"] == "completed", required
    assert len(valid_calls(required, SCHEMAS)) == 1
    named = respond(gemma, streaming, model="gemma", input="What time is it in Berlin?", tools=TOOLS,
                    tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
                    max_output_tokens=60)  # fmt: skip
    assert named["status"] == "completed", named
    (call,) = valid_calls(named, SCHEMAS)
    assert call["name"] == "get_weather"


def test_gemma_auto_answers_or_calls(gemma: EngineServer) -> None:
    response = respond(gemma, True, model="gemma", input="What's the weather in Paris?", tools=TOOLS,
                       parallel_tool_calls=False, max_output_tokens=60)  # fmt: skip
    assert response["status"] in ("completed", "incomplete")
    assert response["output_text"] or [item for item in response["output"] if item["type"] == "function_call"]
    if response["status"] == "completed":  # a call cut at the limit may miss arguments
        valid_calls(response, SCHEMAS)


# --- a raw /completions engine -----------------------------------------------------------


def test_a_completions_upstream_gets_the_protocol_and_its_grammar(tmp_path: Path) -> None:
    engine = ScriptedCompletions("llamacpp")
    template = tmp_path / "gemma3.jinja"
    template.write_text(GEMMA3)
    with serve(engine.app) as engine_url:
        upstream = UpstreamConfig(name="raw", base_url=f"{engine_url}/v1", api="completions", chat_template=template)
        settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                            upstreams=[upstream])  # fmt: skip
        with serve(create_app(settings)) as url:
            server = EngineServer(url, None)
            engine.pieces = ['{"tool_calls": [{"name": "get', '_time", "arguments": {"zone": ', '"CET"}}]}']
            response = respond(server, True, model="tiny", input="Time?", tools=TOOLS, tool_choice="required")
            assert [(item["name"], item["arguments"]) for item in response["output"]] == [("get_time", '{"zone": "CET"}')]
            sent = engine.requests[-1]
            assert "You can call these tools" in sent["prompt"] and '"name": "get_weather"' in sent["prompt"]
            assert "grammar_lazy" not in sent and '"\\"tool_calls\\""' in sent["grammar"]
            assert '"\\"response\\""' not in sent["grammar"]
            engine.pieces = ['{"response": "It is ', 'noon.\\u00e9"}']
            answer = respond(server, False, model="tiny", input="Time?", tools=TOOLS)
            assert answer["output_text"] == "It is noon.é" and answer["status"] == "completed"
            assert '"\\"response\\""' in engine.requests[-1]["grammar"]
