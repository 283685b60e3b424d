"""The in-process engine on a tiny random-weight GGUF: loading, streaming, cancelling,
concurrent requests, forced and lazy tool-call grammars, JSON output, token counts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from responsekit.app import create_app
from responsekit.config import LocalModel, Settings

from .conftest import EngineServer
from .harness import (
    check_response,
    check_stream,
    output,
    read_sse,
    serve,
    start_cli,
    strip_ids,
    wait_for,
)
from .tiny_gguf import HERMES_TEMPLATE, write_tiny_gguf

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z ]{1,12}$"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "offset": {"type": "integer", "minimum": -40, "maximum": 250},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "offset", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather of a city", "parameters": WEATHER_SCHEMA},
    {"type": "function", "name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}},
]  # fmt: skip
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "pattern": "^[a-z]{0,10}$"},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
        "sure": {"type": "boolean"},
    },
    "required": ["answer", "confidence", "sure"],
    "additionalProperties": False,
}


NO_REASONING = {"effort": "none"}
"""The test template lets the model reason first; random weights would never end reasoning."""


def create(server: EngineServer, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "tiny", "temperature": 0, **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


def stream(server: EngineServer, **body: Any) -> dict[str, Any]:
    events = stream_events(server, **body)
    return check_stream(events)


def stream_events(server: EngineServer, **body: Any) -> list[dict[str, Any]]:
    payload = {"model": "tiny", "temperature": 0, "stream": True, **body}
    with httpx.stream("POST", f"{server.base_url}/responses", json=payload, timeout=60) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    return events


def test_the_model_loads_and_is_served_by_name(engine_server: EngineServer) -> None:
    models = httpx.get(f"{engine_server.base_url}/models").json()["data"]
    assert {"id": "tiny", "object": "model", "created": 0, "owned_by": "llama.cpp", "context_window": 4096,
            "max_output_tokens": 4096, "input_modalities": ["text"]} in models  # fmt: skip
    health = httpx.get(f"{engine_server.url}/health").json()
    assert health["status"] == "ok"
    assert [entry["models"] for entry in health["upstreams"] if entry["kind"] == "llama.cpp (in-process)"] == [["tiny"]]


def test_text_streams_token_by_token_and_folds_to_the_same_response(engine_server: EngineServer) -> None:
    events = stream_events(engine_server, input="Tell me a story.", max_output_tokens=200)
    streamed = check_stream(events)
    deltas = [event["delta"] for event in events if event["type"] == "response.output_text.delta"]
    assert len(deltas) > 5
    assert streamed["status"] == "incomplete" and streamed["incomplete_details"] == {"reason": "max_output_tokens"}
    assert streamed["usage"]["output_tokens"] == 200
    whole = create(engine_server, input="Tell me a story.", max_output_tokens=200)
    assert strip_ids(whole["output"]) == strip_ids(streamed["output"])
    assert whole["usage"]["input_tokens"] == streamed["usage"]["input_tokens"]
    assert whole["usage"]["input_tokens_details"]["cached_tokens"] > 0  # the same prompt: its cache was reused


def test_a_disconnect_stops_generation_within_one_token(engine_server: EngineServer) -> None:
    engine = engine_server.engine()
    cancelled = engine.stats.cancelled  # type: ignore[attr-defined]
    payload = {"model": "tiny", "input": "Go on forever.", "stream": True, "max_output_tokens": 3000}
    received = 0
    with httpx.stream("POST", f"{engine_server.base_url}/responses", json=payload, timeout=60) as answer:
        for line in answer.iter_lines():
            received += line.startswith("data: ") and "output_text.delta" in line
            if received == 10:
                break
    wait_for(lambda: engine.stats.cancelled > cancelled, timeout=10)  # type: ignore[attr-defined]
    assert engine.stats.tokens_after_cancel[-1] <= 1  # type: ignore[attr-defined]
    # Both sequences are free again: a request is served at once.
    started = time.monotonic()
    create(engine_server, input="hi", max_output_tokens=16)
    assert time.monotonic() - started < 5


def test_cancelling_a_background_response_stops_its_generation(engine_server: EngineServer) -> None:
    engine = engine_server.engine()
    cancelled = engine.stats.cancelled  # type: ignore[attr-defined]
    response = create(engine_server, input="Go on forever.", background=True, max_output_tokens=3500, temperature=1)
    url = f"{engine_server.base_url}/responses/{response['id']}"
    with httpx.stream("GET", url, params={"stream": "true"}, timeout=60) as follow:
        lines = follow.iter_lines()
        next(line for line in lines if "output_text.delta" in line)
        answer = httpx.post(f"{url}/cancel")
        assert answer.status_code == 200, answer.text
        last = [json.loads(line[6:]) for line in lines if line.startswith("data: {")][-1]
    wait_for(lambda: engine.stats.cancelled > cancelled, timeout=10)  # type: ignore[attr-defined]
    assert engine.stats.tokens_after_cancel[-1] <= 1  # type: ignore[attr-defined]
    assert last["type"] == "response.incomplete" and last["response"]["status"] == "cancelled"


def test_four_concurrent_requests_all_complete(engine_server: EngineServer) -> None:
    engine = engine_server.engine()
    finished = engine.stats.finished  # type: ignore[attr-defined]
    results: list[tuple[int, dict[str, Any]]] = []
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            results.append((index % 2, stream(engine_server, input=f"Request {index % 2}", max_output_tokens=40)))
        except BaseException as exc:  # noqa: BLE001  (re-raised below, in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert len(results) == 4
    assert all(result["usage"]["output_tokens"] == 40 for _, result in results)
    texts: dict[int, set[str]] = {}
    for prompt, result in results:
        texts.setdefault(prompt, set()).add(result["output_text"])
    assert all(len(same) == 1 for same in texts.values()), texts  # greedy: one prompt, one answer, however queued
    assert engine.stats.finished - finished == 4  # type: ignore[attr-defined]


def function_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == "function_call"]


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_tool_choice_required_forces_a_valid_call(engine_server: EngineServer, streaming: bool) -> None:
    # One call: the test model never ends its turn by itself, so with parallel calls allowed
    # it would keep adding calls until the token limit.
    body = {"input": "What's the weather in Paris?", "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "max_output_tokens": 300, "reasoning": NO_REASONING}  # fmt: skip
    response = stream(engine_server, **body) if streaming else create(engine_server, **body)
    assert response["status"] == "completed"
    (call,) = response["output"]
    assert call["type"] == "function_call"
    jsonschema.validate(json.loads(call["arguments"]), {tool["name"]: tool["parameters"] for tool in TOOLS}[call["name"]])


def test_a_named_function_is_the_one_called(engine_server: EngineServer) -> None:
    response = stream(engine_server, input="Time?", tools=TOOLS, parallel_tool_calls=False, max_output_tokens=300,
                      tool_choice={"type": "function", "name": "get_weather"}, reasoning=NO_REASONING)  # fmt: skip
    (call,) = function_calls(response)
    assert call["name"] == "get_weather"
    arguments = json.loads(call["arguments"])
    jsonschema.validate(arguments, WEATHER_SCHEMA)
    assert 1 <= arguments["days"] <= 14 and -40 <= arguments["offset"] <= 250


def test_json_schema_output_validates(engine_server: EngineServer) -> None:
    text = {"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}}
    body = {"input": "Answer in JSON.", "text": text, "max_output_tokens": 200, "reasoning": NO_REASONING}
    for response in (stream(engine_server, **body), create(engine_server, **body)):
        assert response["status"] == "completed"
        jsonschema.validate(json.loads(response["output_text"]), ANSWER_SCHEMA)
    # json_object: any object. Random weights never end a free key, so the output is cut,
    # but it is an object's beginning all the same.
    json_object = stream(engine_server, input="JSON please", text={"format": {"type": "json_object"}}, max_output_tokens=30,
                         reasoning=NO_REASONING)  # fmt: skip
    assert json_object["output_text"].startswith('{"')


def test_chat_completions_stop_at_a_stop_text(engine_server: EngineServer) -> None:
    """A stop text ends the answer before it, wherever the tokens split it."""
    client = engine_server.client()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me a story."}], "temperature": 0,
            "max_tokens": 40}  # fmt: skip
    free = client.chat.completions.create(**body)  # type: ignore[call-overload]
    text = free.choices[0].message.content
    assert free.choices[0].finish_reason == "length" and len(text) > 20
    stop = max((text[i : i + 3] for i in range(len(text) - 3)), key=text.index)  # the latest to appear first
    assert text.index(stop) > 0
    cut = client.chat.completions.create(**body, stop=[stop])  # type: ignore[call-overload]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[: text.index(stop)]
    chunks = list(client.chat.completions.create(**body, stop=[stop], stream=True))  # type: ignore[call-overload]
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == text[: text.index(stop)]


def test_a_lone_surrogate_in_the_input_is_no_500(engine_server: EngineServer, completions_server: EngineServer) -> None:
    body = b'{"model": "tiny", "input": "broken \\ud800 text", "max_output_tokens": 16}'
    for server in (engine_server, completions_server):
        answer = httpx.post(f"{server.base_url}/responses", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 200, answer.text
        counted = httpx.post(f"{server.base_url}/responses/input_tokens", content=body,
                             headers={"content-type": "application/json"})  # fmt: skip
        assert counted.status_code == 200, counted.text


def test_input_tokens_are_counted_by_the_models_tokenizer(engine_server: EngineServer) -> None:
    body = {"model": "tiny", "input": "Count these words, please.", "tools": TOOLS}
    counted = httpx.post(f"{engine_server.base_url}/responses/input_tokens", json=body).json()
    assert counted.get("estimated") is not True
    used = create(engine_server, **body, max_output_tokens=16)["usage"]["input_tokens"]
    assert counted["input_tokens"] == used


@pytest.fixture(scope="module")
def eager_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A model that starts every answer with `<tool_call>` and then writes noise."""
    directory = tmp_path_factory.mktemp("eager")
    model = write_tiny_gguf(directory / "eager.gguf", eager="<tool_call>")
    settings = Settings(probe=False, data_dir=directory, database_url=f"sqlite:///{directory / 'state.db'}",
                        models=[LocalModel(path=model, name="tiny")])  # fmt: skip
    app = create_app(settings)
    with serve(app) as url:
        yield EngineServer(url, app)


def test_tool_choice_auto_keeps_a_call_the_model_starts_well_formed(eager_server: EngineServer) -> None:
    """The lazy grammar switches on at `<tool_call>`: noise becomes a valid call. Without
    tools (no grammar) the same model writes only markers."""
    response = stream(eager_server, input="Weather?", tools=TOOLS, parallel_tool_calls=False, max_output_tokens=300)
    assert response["status"] == "completed"
    (call,) = function_calls(response)
    jsonschema.validate(json.loads(call["arguments"]), {tool["name"]: tool["parameters"] for tool in TOOLS}[call["name"]])
    free = create(eager_server, input="Weather?", max_output_tokens=20)
    assert not function_calls(free) and free["status"] == "incomplete"


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_a_qwen3_coder_model_is_forced_into_its_own_xml_calls(tmp_path: Path, streaming: bool) -> None:
    """The real Qwen3-Coder template in the model file: the format is read from it, the
    grammar writes `<function=…><parameter=…>` calls with bare values, and the parser types
    them by the schema into arguments that validate."""
    template = (Path(__file__).parent / "data/formats/templates/Qwen3-Coder.jinja").read_text()
    model = write_tiny_gguf(tmp_path / "coder.gguf", template=template)
    settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                        models=[LocalModel(path=model, name="tiny")])  # fmt: skip
    with serve(create_app(settings)) as url:
        server = EngineServer(url, None)
        body = {"input": "Weather in Paris for a week?", "tools": TOOLS, "tool_choice": "required",
                "parallel_tool_calls": False, "max_output_tokens": 300}  # fmt: skip
        response = stream(server, **body) if streaming else create(server, **body)
        assert response["status"] == "completed"
        (call,) = response["output"]
        assert call["type"] == "function_call"
        schema = {tool["name"]: tool["parameters"] for tool in TOOLS}[call["name"]]
        jsonschema.validate(json.loads(call["arguments"]), schema)


def test_a_template_refusal_is_a_400_with_its_message(tiny_gguf: Path, tmp_path: Path) -> None:
    template = tmp_path / "strict.jinja"
    template.write_text("{% if messages|length > 1 %}{{ raise_exception('Only one message, please.') }}{% endif %}"
                        "<|im_start|>user\n{{ messages[0].content }}<|im_end|>\n<|im_start|>assistant\n")  # fmt: skip
    settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                        models=[LocalModel(path=tiny_gguf, chat_template=template, max_queue=0, context=8192)])  # fmt: skip
    with serve(create_app(settings)) as url:
        body = {"model": "tiny", "input": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
        answer = httpx.post(f"{url}/v1/responses", json=body)
        assert answer.status_code == 400
        assert answer.json()["error"]["message"] == "Only one message, please."
        assert answer.json()["error"]["type"] == "invalid_request_error"
        counted = httpx.post(f"{url}/v1/responses/input_tokens", json=body)
        assert counted.status_code == 400 and counted.json()["error"]["message"] == "Only one message, please."
        with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}) as streamed:
            events, _ = read_sse(streamed.iter_lines())
        failed = check_stream(events)
        assert failed["status"] == "failed" and failed["error"]["message"] == "Only one message, please."
        # One sequence and no queue: while one request generates, the next is turned away.
        payload = {"model": "tiny", "input": "long", "stream": True, "max_output_tokens": 8000}
        with httpx.stream("POST", f"{url}/v1/responses", json=payload) as busy:
            lines = busy.iter_lines()  # kept: a dropped iterator closes the stream (a disconnect)
            next(line for line in lines if "output_text.delta" in line)
            refused = httpx.post(f"{url}/v1/responses", json={"model": "tiny", "input": "x"})
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_serve_model_from_the_command_line_logs_its_loading(tiny_gguf: Path) -> None:
    process, url = start_cli("--model", str(tiny_gguf), "--no-probe")
    try:
        response = httpx.post(f"{url}/v1/responses", json={"model": "tiny", "input": "hi", "max_output_tokens": 16}).json()
        check_response(response)
        log = output(process)
        assert "model tiny: loading" in log and "loaded in" in log and "hermes_json" in log
    finally:
        process.terminate()
        process.wait(10)


def test_a_missing_model_file_stops_the_server_with_a_clear_message(tmp_path: Path) -> None:
    process = subprocess.run(
        [sys.executable, "-m", "responsekit", "serve", "--model", str(tmp_path / "absent.gguf"), "--no-probe",
         "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert process.returncode != 0
    assert "file not found" in process.stdout + process.stderr


def test_hf_repo_and_file_come_from_the_hugging_face_cache(tiny_gguf: Path, tmp_path: Path) -> None:
    """`--hf-repo/--hf-file` go through huggingface_hub; offline, a file already in its
    cache is used (nothing can be downloaded on the test machines)."""
    snapshot = tmp_path / "hub" / "models--responsekit--tiny-GGUF" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    shutil.copy(tiny_gguf, snapshot / "tiny-q8.gguf")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    env = {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    process, url = start_cli("--hf-repo", "responsekit/tiny-GGUF", "--hf-file", "tiny-q8.gguf", "--no-probe", env=env)
    try:
        assert [model["id"] for model in httpx.get(f"{url}/v1/models").json()["data"]] == ["tiny-q8"]
        response = httpx.post(f"{url}/v1/responses", json={"model": "tiny-q8", "input": "hi", "max_output_tokens": 16})
        assert response.json()["usage"]["output_tokens"] == 16
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize(("thinking", "spent"), [({"type": "enabled", "budget_tokens": 12}, 12),
                                                 ({"type": "disabled"}, 0), ({"type": "adaptive"}, None)])  # fmt: skip
def test_a_thinking_budget_ends_the_reasoning_at_its_limit(tmp_path: Path, thinking: dict[str, Any],
                                                           spent: int | None) -> None:  # fmt: skip
    """The template opens the reasoning and random weights never close it: at the budget the server
    writes `</think>` in the model's place and the model answers; `disabled` closes it at once,
    as this template cannot leave it out; without a budget the reasoning takes every token."""
    template = HERMES_TEMPLATE.replace("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}",
                                       "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}")
    assert template != HERMES_TEMPLATE
    model = write_tiny_gguf(tmp_path / "thinker.gguf", template=template)
    settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                        models=[LocalModel(path=model, name="tiny")])  # fmt: skip
    with serve(create_app(settings)) as url:
        body = {"model": "tiny", "max_tokens": 60, "temperature": 0, "thinking": thinking,
                "messages": [{"role": "user", "content": "Tell me a story."}]}  # fmt: skip
        answer = httpx.post(f"{url}/v1/messages", json=body, timeout=60,
                            headers={"anthropic-version": "2023-06-01", "x-api-key": "k"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    blocks = answer.json()["content"]
    reasoning = "".join(block["thinking"] for block in blocks if block["type"] == "thinking")
    text = "".join(block["text"] for block in blocks if block["type"] == "text")
    if spent is None:
        assert reasoning and not text and answer.json()["usage"]["output_tokens"] == 60
    else:
        assert reasoning.count("work") == spent and text, "the random model writes one `work` a token"
