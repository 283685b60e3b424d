"""Raw `/completions` upstreams: ResponseKit renders the template and parses the text.

Against llama-cpp-python's real server on the tiny model, the results equal those of the
in-process engine; against a scripted engine, each kind gets its grammar in its own
parameter, the template from llama.cpp's `/props`, and finish reasons, usage and errors map.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .conftest import EngineServer
from .harness import DATA, check_response, check_stream, read_sse, serve, strip_ids
from .test_llama_cpp import ANSWER_SCHEMA, NO_REASONING, TOOLS, WEATHER_SCHEMA
from .tiny_gguf import HERMES_TEMPLATE


def stream(server: EngineServer, **body: Any) -> dict[str, Any]:
    payload = {"model": "tiny", "temperature": 0, "stream": True, **body}
    with httpx.stream("POST", f"{server.base_url}/responses", json=payload, timeout=60) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    return check_stream(events)


def create(server: EngineServer, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "tiny", "temperature": 0, **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


# --- the same model behind llama-cpp-python's server ----------------------------------


def test_text_equals_the_in_process_engine(engine_server: EngineServer, completions_server: EngineServer) -> None:
    body = {"input": "Tell me a story.", "max_output_tokens": 48}
    local, remote = stream(engine_server, **body), stream(completions_server, **body)
    assert remote["output_text"] and remote["output_text"] == local["output_text"]
    assert remote["status"] == local["status"] == "incomplete"
    assert remote["usage"]["input_tokens"] == local["usage"]["input_tokens"]
    assert strip_ids(create(completions_server, **body)["output"]) == strip_ids(remote["output"])


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_a_forced_call_equals_the_in_process_engine(engine_server: EngineServer, completions_server: EngineServer,
                                                    streaming: bool) -> None:  # fmt: skip
    body = {"input": "Weather in Rome?", "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
            "max_output_tokens": 300, "reasoning": NO_REASONING}  # fmt: skip
    ask = stream if streaming else create
    local, remote = ask(engine_server, **body), ask(completions_server, **body)
    assert remote["status"] == "completed"
    (call,) = remote["output"]
    assert call["type"] == "function_call"
    jsonschema.validate(json.loads(call["arguments"]), {tool["name"]: tool["parameters"] for tool in TOOLS}[call["name"]])
    assert strip_ids(remote["output"]) == strip_ids(local["output"])


def test_a_named_call_and_json_output_equal_the_in_process_engine(engine_server: EngineServer,
                                                                  completions_server: EngineServer) -> None:  # fmt: skip
    named = {"input": "Time?", "tools": TOOLS, "tool_choice": {"type": "function", "name": "get_weather"},
             "parallel_tool_calls": False, "max_output_tokens": 300, "reasoning": NO_REASONING}  # fmt: skip
    local, remote = stream(engine_server, **named), stream(completions_server, **named)
    assert [item["name"] for item in remote["output"]] == ["get_weather"]
    jsonschema.validate(json.loads(remote["output"][0]["arguments"]), WEATHER_SCHEMA)
    assert strip_ids(remote["output"]) == strip_ids(local["output"])
    text = {"format": {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA}}
    answer = {"input": "JSON!", "text": text, "max_output_tokens": 200, "reasoning": NO_REASONING}
    local, remote = stream(engine_server, **answer), stream(completions_server, **answer)
    jsonschema.validate(json.loads(remote["output_text"]), ANSWER_SCHEMA)
    assert remote["output_text"] == local["output_text"]


def test_input_tokens_are_counted_by_the_engine(engine_server: EngineServer, completions_server: EngineServer) -> None:
    body = {"model": "tiny", "input": "How many tokens is this?", "tools": TOOLS}
    remote = httpx.post(f"{completions_server.base_url}/responses/input_tokens", json=body).json()
    local = httpx.post(f"{engine_server.base_url}/responses/input_tokens", json=body).json()
    assert remote.get("estimated") is not True
    assert remote["input_tokens"] == local["input_tokens"]


# --- a scripted engine: what each kind is sent, and how its answers map ---------------


class ScriptedCompletions:
    """A `/v1/completions` engine on loopback that answers with scripted text pieces."""

    def __init__(self, owned_by: str) -> None:
        self.owned_by = owned_by
        self.requests: list[dict[str, Any]] = []
        self.pieces: list[str] = ["Hello", " there"]
        self.finish = "stop"
        self.usage: dict[str, int] | None = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
        self.status = 200
        self.app = Starlette(routes=[
            Route("/v1/models", self._models),
            Route("/v1/completions", self._complete, methods=["POST"]),
            Route("/props", self._props),
            Route("/tokenize", self._tokenize, methods=["POST"]),
        ])  # fmt: skip

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": self.owned_by}]})

    async def _props(self, request: Request) -> JSONResponse:
        return JSONResponse({"chat_template": HERMES_TEMPLATE, "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"})

    async def _tokenize(self, request: Request) -> JSONResponse:
        body = await request.json()
        if self.owned_by == "vllm":
            return JSONResponse({"count": len(body["prompt"]), "tokens": [], "max_model_len": 4096})
        return JSONResponse({"tokens": list(range(len(body["content"])))})

    async def _complete(self, request: Request) -> Response:
        self.requests.append(await request.json())
        if self.status != 200:
            return JSONResponse({"error": {"message": "prompt is too long for the context window", "code": 400}},
                                status_code=self.status)  # fmt: skip

        def frames() -> Iterator[str]:
            for piece in self.pieces:
                yield "data: " + json.dumps({"object": "text_completion", "choices": [{"index": 0, "text": piece}]}) + "\n\n"
            last: dict[str, Any] = {"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": self.finish}]}
            if self.usage:
                last["usage"] = self.usage
            yield "data: " + json.dumps(last) + "\n\ndata: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")


@pytest.fixture(params=["llamacpp", "vllm", "sglang"])
def scripted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ScriptedCompletions, EngineServer]]:
    engine = ScriptedCompletions(request.param)
    with serve(engine.app) as engine_url:
        upstream = UpstreamConfig(name="raw", base_url=f"{engine_url}/v1", api="completions", kind=request.param)
        if request.param != "llamacpp":  # only llama.cpp tells its template
            template = tmp_path / "template.jinja"
            template.write_text(HERMES_TEMPLATE)
            upstream.chat_template = template
        settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                            upstreams=[upstream])  # fmt: skip
        app = create_app(settings)
        with serve(app) as url:
            yield engine, EngineServer(url, app)


def test_the_prompt_is_the_rendered_template_and_text_streams_back(scripted: tuple[ScriptedCompletions, EngineServer]) -> None:
    engine, server = scripted
    response = stream(server, input="Hi!", instructions="Be brief.", max_output_tokens=64)
    assert response["output_text"] == "Hello there" and response["status"] == "completed"
    assert response["usage"]["input_tokens"] == 11 and response["usage"]["output_tokens"] == 2
    sent = engine.requests[-1]
    assert sent["prompt"] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                              "<|im_start|>assistant\n")  # fmt: skip
    assert sent["stream"] is True and sent["max_tokens"] == 64 and sent["temperature"] == 0
    assert "<|im_end|>" in sent["stop"]
    assert ("skip_special_tokens" in sent) == (engine.owned_by in ("vllm", "sglang"))


def test_each_kind_gets_the_grammar_in_its_own_parameter(scripted: tuple[ScriptedCompletions, EngineServer]) -> None:
    engine, server = scripted
    engine.pieces = ['<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>']
    response = stream(server, input="Time?", tools=TOOLS, tool_choice="required")
    assert [(item["name"], item["arguments"]) for item in response["output"]] == [("get_time", '{"zone": "UTC"}')]
    assert response["status"] == "completed"  # "stop" with calls is a tool-call finish
    sent = engine.requests[-1]
    grammar = {"llamacpp": lambda: sent["grammar"], "vllm": lambda: sent["structured_outputs"]["grammar"],
               "sglang": lambda: sent["ebnf"]}[engine.owned_by]()  # fmt: skip
    assert grammar.startswith("call0 ::= ") and '"<tool_call>\\n{\\"name\\": \\"get_time' in grammar
    assert "root ::=" in grammar
    # tool_choice auto: a lazy grammar, which only llama.cpp's server takes.
    stream(server, input="Time?", tools=TOOLS)
    sent = engine.requests[-1]
    if engine.owned_by == "llamacpp":
        assert sent["grammar_lazy"] is True
        (trigger,) = sent["grammar_triggers"]
        assert trigger["type"] == 3 and "(<tool_call>)" in trigger["value"]
    else:
        assert not {"grammar", "structured_outputs", "ebnf", "grammar_lazy"} & set(sent)


def test_finish_reasons_usage_and_errors_map(scripted: tuple[ScriptedCompletions, EngineServer]) -> None:
    engine, server = scripted
    engine.finish, engine.usage = "length", None
    cut = create(server, input="Hi", max_output_tokens=16)
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    # No usage from the engine: the prompt is counted by its /tokenize, the output by chunks.
    prompt = engine.requests[-1]["prompt"]
    assert cut["usage"]["input_tokens"] == len(prompt) and cut["usage"]["output_tokens"] == 2
    counted = httpx.post(f"{server.base_url}/responses/input_tokens", json={"model": "tiny", "input": "Hi"}).json()
    assert counted["input_tokens"] == len(prompt) and counted.get("estimated") is not True
    engine.status = 400
    failed = httpx.post(f"{server.base_url}/responses", json={"model": "tiny", "input": "Hi"})
    assert failed.status_code == 400 and failed.json()["error"]["code"] == "context_length_exceeded"


def test_a_template_refusal_never_reaches_the_engine(tmp_path: Path) -> None:
    engine = ScriptedCompletions("llamacpp")
    template = tmp_path / "refusing.jinja"
    template.write_text("{{ raise_exception('This model does not take tools.') if tools else 'ok' }}")
    with serve(engine.app) as engine_url:
        upstream = UpstreamConfig(base_url=f"{engine_url}/v1", api="completions", chat_template=template)
        settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                            upstreams=[upstream])  # fmt: skip
        with serve(create_app(settings)) as url:
            answer = httpx.post(f"{url}/v1/responses", json={"model": "tiny", "input": "Hi", "tools": TOOLS})
            assert answer.status_code == 400
            assert answer.json()["error"]["message"] == "This model does not take tools."
            counted = httpx.post(f"{url}/v1/responses/input_tokens", json={"model": "tiny", "input": "Hi", "tools": TOOLS})
            assert counted.status_code == 400
            assert httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny", "messages": [
                {"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}).status_code == 400
            assert engine.requests == []
            ok = httpx.post(f"{url}/v1/responses", json={"model": "tiny", "input": "Hi"})
            assert ok.status_code == 200 and engine.requests[-1]["prompt"] == "ok"


def test_an_output_maximum_beyond_the_window_is_clamped(tmp_path: Path) -> None:
    """With the window known (configured here), a larger maximum gets what the rendered prompt, as the
    engine's /tokenize counts it (a token a character here), leaves; a small one is sent as asked."""
    engine = ScriptedCompletions("llamacpp")
    with serve(engine.app) as engine_url:
        upstream = UpstreamConfig(base_url=f"{engine_url}/v1", api="completions", context_window=4000)
        settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                            upstreams=[upstream])  # fmt: skip
        app = create_app(settings)
        with serve(app) as url:
            create(EngineServer(url, app), input="Hi", max_output_tokens=32000)
            assert engine.requests[-1]["max_tokens"] == 4000 - len(engine.requests[-1]["prompt"])
            create(EngineServer(url, app), input="Hi", max_output_tokens=100)
            assert engine.requests[-1]["max_tokens"] == 100


def test_a_harmony_model_gets_its_call_grammars(tmp_path: Path) -> None:
    """gpt-oss behind a raw engine: `required` sends Harmony's forced call grammar
    and `auto` its lazy one, triggered by the recipient its template writes; the call the
    template renders comes back as that call."""
    engine = ScriptedCompletions("llamacpp")
    engine.pieces = [' to=functions.get_time<|channel|>commentary json<|message|>{"zone": "UTC"}<|call|>']
    with serve(engine.app) as engine_url:
        upstream = UpstreamConfig(base_url=f"{engine_url}/v1", api="completions",
                                  chat_template=DATA / "formats" / "templates" / "openai-gpt-oss-120b.jinja")  # fmt: skip
        settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 's.db'}",
                            upstreams=[upstream])  # fmt: skip
        app = create_app(settings)
        with serve(app) as url:
            server = EngineServer(url, app)
            for choice in ("required", "auto"):
                response = stream(server, input="Time?", tools=TOOLS, tool_choice=choice)
                assert [(item["name"], item["arguments"]) for item in response["output"]] == [
                    ("get_time", '{"zone": "UTC"}')
                ]
                sent = engine.requests[-1]
                assert '" to=functions.get_time" "<|channel|>commentary json<|message|>"' in sent["grammar"]
                assert sent.get("grammar_lazy", False) is (choice == "auto")
            (trigger,) = sent["grammar_triggers"]
            answer = "<|channel|>analysis<|message|>Use to=functions.get_time.<|end|><|start|>assistant to=functions.get_time"
            found = re.fullmatch(trigger["value"], answer)  # after the analysis message, not in it
            assert found is not None and found.start(1) == answer.rindex(" to=")
