"""A real model through the product: the Gemma 3 270M GGUF (a base model without a
chat template) run in-process, behind llama-cpp-python's own OpenAI-compatible server as a
chat upstream, and behind the same server's raw `/v1/completions` with the template
rendered by ResponseKit.

A 270M base model writes poor answers; what is checked is the path: the events and
objects validate, grammars hold its calls and JSON to their schemas, the KV cache serves a
chained turn's prefix. Generations are kept short (2 cores).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from responsekit.app import create_app
from responsekit.config import LocalModel, Settings, UpstreamConfig

from .conftest import EngineServer
from .harness import check_response, check_stream, read_sse, serve
from .llama_server import llama_cpp_server

MODEL = "gemma-3-270m"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather forecast for a city",
          "parameters": WEATHER_SCHEMA}]  # fmt: skip
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer", "minimum": 0,
                                                                                 "maximum": 50_000_000}},
    "required": ["city", "population"],
    "additionalProperties": False,
}  # fmt: skip


def _settings(directory: Path, **options: Any) -> Settings:
    return Settings(probe=False, data_dir=directory, database_url=f"sqlite:///{directory / 'state.db'}", **options)


@pytest.fixture(scope="module")
def gemma_server(gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """ResponseKit running the real Gemma 3 270M in-process (its template chosen from its architecture)."""
    model = LocalModel(path=gemma_gguf, name=MODEL, context=2048)
    app = create_app(_settings(tmp_path_factory.mktemp("gemma"), models=[model]))
    with serve(app) as url:
        yield EngineServer(url, app)


def create(server: EngineServer, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{server.base_url}/responses", json={"model": MODEL, "temperature": 0, **body}, timeout=120)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


def stream(server: EngineServer, **body: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    payload = {"model": MODEL, "temperature": 0, "stream": True, **body}
    with httpx.stream("POST", f"{server.base_url}/responses", json=payload, timeout=120) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    return check_stream(events), events


def test_a_response_completes_and_its_stream_validates(gemma_server: EngineServer) -> None:
    body = {"input": "Name three colours of the rainbow.", "max_output_tokens": 24}
    final, events = stream(gemma_server, **body)
    assert final["status"] in ("completed", "incomplete")
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas.strip() and deltas == final["output_text"]
    whole = create(gemma_server, **body)
    assert whole["output_text"] == final["output_text"]  # greedy: the fold of the same stream
    assert whole["usage"]["input_tokens"] == final["usage"]["input_tokens"] > 5


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_a_forced_call_validates_against_its_schema(gemma_server: EngineServer, streaming: bool) -> None:
    # One call: allowed several, the greedy base model repeats `, {call}` until the token limit
    # (every call valid, the response incomplete).
    body = {"input": "What will the weather be in Oslo for the next three days?", "tools": TOOLS,
            "tool_choice": "required", "parallel_tool_calls": False, "max_output_tokens": 120}  # fmt: skip
    response = stream(gemma_server, **body)[0] if streaming else create(gemma_server, **body)
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    assert calls and response["status"] == "completed"
    for call in calls:
        assert call["name"] == "get_weather"
        jsonschema.validate(json.loads(call["arguments"]), WEATHER_SCHEMA)


def test_json_schema_output_validates(gemma_server: EngineServer) -> None:
    text = {"format": {"type": "json_schema", "name": "city", "schema": ANSWER_SCHEMA, "strict": True}}
    response = create(gemma_server, input="The largest city of Norway, as JSON.", text=text, max_output_tokens=80)
    assert response["status"] == "completed"
    jsonschema.validate(json.loads(response["output_text"]), ANSWER_SCHEMA)


def test_a_chained_turn_reuses_the_cached_prefix(gemma_server: EngineServer) -> None:
    first = create(gemma_server, input="Tell me about lighthouses.", max_output_tokens=16)
    second = create(gemma_server, input="And about harbours?", previous_response_id=first["id"], max_output_tokens=16)
    usage = second["usage"]
    # The whole first prompt is the start of the second: the sequence's KV cache served it.
    assert first["usage"]["input_tokens"] <= usage["input_tokens_details"]["cached_tokens"] < usage["input_tokens"]


@pytest.fixture(scope="module")
def gemma_llama_cpp_server(gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's own server serving Gemma with its Gemma chat format; yields its /v1 URL."""
    with llama_cpp_server(gemma_gguf, MODEL, tmp_path_factory.mktemp("llama-cpp-server"), "--chat_format", "gemma",
                          "--n_ctx", "2048") as url:  # fmt: skip
        yield url


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_behind_llama_cpp_python_server_a_streamed_response_completes(
    gemma_llama_cpp_server: str, gemma_gguf: Path, tmp_path: Path, api: str
) -> None:
    # `completions`: ResponseKit renders the template it chooses for the GGUF and sends the prompt.
    upstream = UpstreamConfig(name="llama-cpp-python", base_url=gemma_llama_cpp_server, api=api, models=[MODEL],
                              **({"chat_template": gemma_gguf} if api == "completions" else {}))  # fmt: skip
    app = create_app(_settings(tmp_path, upstreams=[upstream]))
    with serve(app) as url:
        server = EngineServer(url, app)
        final, events = stream(server, input="Say hello to the harbour master.", max_output_tokens=16)
    assert final["status"] in ("completed", "incomplete")
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta").strip()
    assert final["usage"]["input_tokens"] > 5 and final["usage"]["output_tokens"] > 0
