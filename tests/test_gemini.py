"""The Gemini API (`/v1beta/models/{model}:generateContent` and its kin) rendered from the canonical stream.

Every answer and every streamed chunk is validated strictly against the `google-genai` SDK's own
types (`GenerateContentResponse`, `CountTokensResponse`, `Model`, `ListModelsResponse`), and its
keys compared with the types' fields; both of Google's SDKs (Python and JavaScript) drive the API
as Gemini's users do.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import subprocess
import time
import types as pytypes
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import httpx
import pydantic
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import models as genai_models
from google.genai import types
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from responsekit.app import create_app
from responsekit.config import LimitsConfig, Settings, UpstreamConfig
from responsekit.operations.logs import ACCESS_LOGGER

from .conftest import Server
from .harness import (
    DATA,
    ScriptedUpstream,
    exchange,
    serve,
    text_exchange,
    tool_call_exchange,
    wait_for,
)
from .test_faults import FAULTS, _upstreams
from .test_vector_stores import pdf_with_text
from .test_web_search import LXML_GONE, SearchEngine, Site, break_web, searching

JS = Path(__file__).parent / "js"
HEADERS = {"x-goog-api-key": "test"}
WEATHER = {"functionDeclarations": [{"name": "get_weather", "description": "The weather",
                                     "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}},
                                                    "required": ["city"]}}]}  # fmt: skip


def body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def path(action: str, model: str = "test-model") -> str:
    return f"/v1beta/models/{model}:{action}"


# --- schema truth -----------------------------------------------------------------------------


def check_keys(annotation: Any, value: Any, where: str) -> None:
    """Every key of `value` is a field (by its wire name) of the SDK type `annotation`, all the way
    down: the SDK's types forbid unknown keys, and this says so independently of that setting."""
    if value is None:
        return
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        assert isinstance(value, dict), f"{where} is not an object"
        fields = {(info.alias or name): info for name, info in annotation.model_fields.items()}
        unknown = set(value) - set(fields)
        assert not unknown, f"{where} has keys {sorted(unknown)} that {annotation.__name__} lacks"
        for key, item in value.items():
            check_keys(fields[key].annotation, item, f"{where}.{key}")
    elif origin in (Union, pytypes.UnionType):
        models = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(models) == 1:
            check_keys(models[0], value, where)
    elif origin is list:
        assert isinstance(value, list), f"{where} is not a list"
        for position, item in enumerate(value):
            check_keys(get_args(annotation)[0], item, f"{where}[{position}]")
    elif origin is dict:
        for key, item in value.items():
            check_keys(get_args(annotation)[1], item, f"{where}.{key}")


def check(kind: type[pydantic.BaseModel], wire: dict[str, Any]) -> Any:
    """`wire` as the SDK's type `kind`, strictly (JSON mode: enums and base64 bytes as on the wire)."""
    check_keys(kind, wire, kind.__name__)
    return kind.model_validate_json(json.dumps(wire), strict=True)


def check_response(wire: dict[str, Any]) -> types.GenerateContentResponse:
    response = check(types.GenerateContentResponse, wire)
    assert len(response.candidates) == 1 and response.candidates[0].index == 0
    assert wire["modelVersion"] and wire["responseId"]
    return response


def check_error(wire: dict[str, Any], status: int, name: str) -> str:
    """Google's envelope: `{"error": {"code", "message", "status"}}`."""
    assert set(wire) == {"error"} and set(wire["error"]) == {"code", "message", "status"}, wire
    assert wire["error"]["code"] == status and wire["error"]["status"] == name, wire
    return wire["error"]["message"]


def check_model(wire: dict[str, Any]) -> types.Model:
    """A `Model` as the SDK reads the wire: `supportedGenerationMethods` is its `supportedActions`."""
    known = {"name", "displayName", "description", "version", "inputTokenLimit", "outputTokenLimit",
             "supportedGenerationMethods", "temperature", "maxTemperature", "topP", "topK", "thinking"}  # fmt: skip
    assert set(wire) <= known, set(wire) - known
    assert wire["name"].startswith("models/") and wire["supportedGenerationMethods"]
    converted = genai_models._Model_from_mldev(wire)
    converted.pop("tuned_model_info")  # the converter copies the whole object there (`_self`): the SDK drops it
    return types.Model.model_validate(converted, strict=True)


def test_the_sdk_types_refuse_unknown_keys():
    """The strictness the checks lean on: the SDK's types do not silently accept unknown keys."""
    with pytest.raises(pydantic.ValidationError):
        types.GenerateContentResponse.model_validate_json('{"candidates": [], "surprise": 1}', strict=True)
    with pytest.raises(AssertionError):
        check_keys(types.GenerateContentResponse, {"candidates": [{"content": {"parts": [{"txt": "x"}]}}]}, "r")


# --- reading streams ----------------------------------------------------------------------------


def read_sse(answer: httpx.Response) -> list[dict[str, Any]]:
    """An `alt=sse` body: `data:` lines only, but for an error ending the stream, which is bare JSON
    as Google's API sends it (the SDKs raise on it, and take a `data:` line for a response)."""
    chunks = []
    for line in answer.iter_lines():
        if chunks and "error" in chunks[-1]:
            assert not line, f"a line after the error: {line!r}"
        elif line.startswith("{"):
            chunks.append(json.loads(line))
            assert list(chunks[-1]) == ["error"], f"a bare line that is not an error: {line!r}"
        elif line:
            assert line.startswith("data: ") and not line.startswith("data: [DONE]"), f"unexpected line {line!r}"
            chunks.append(json.loads(line[6:]))
    return chunks


def stream(url: str, request: dict[str, Any], model: str = "test-model", *, sse: bool = True,
           headers: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """A streamed answer's chunks, each checked; an error only as the last one."""
    params = {"alt": "sse"} if sse else {}
    with httpx.stream("POST", f"{url}{path('streamGenerateContent', model)}", json=request, params=params,
                      headers=headers or HEADERS, timeout=60) as answer:  # fmt: skip
        assert answer.status_code == 200, answer.read()
        if sse:
            assert answer.headers["content-type"].startswith("text/event-stream")
            chunks = read_sse(answer)
        else:
            assert answer.headers["content-type"].startswith("application/json")
            raw = answer.read()
            assert raw.startswith(b"[") and raw.endswith(b"]")
            chunks = json.loads(raw)
    for position, chunk in enumerate(chunks):
        if "error" in chunk:
            assert position == len(chunks) - 1, "an error ends the stream"
            assert list(chunk) == ["error"], "the SDKs spot an error chunk by its first key"
            continue
        check_response(chunk)
        finished = chunk["candidates"][0].get("finishReason")
        assert bool(finished) == (position == len(chunks) - 1) == ("usageMetadata" in chunk), "the last chunk ends it"
    return chunks


def fold(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The response a client assembles from the chunks: parts in order, a text part joining the one
    before it of its kind unless it carries a signature; the rest from the last chunk."""
    parts: list[dict[str, Any]] = []
    for chunk in chunks:
        for part in chunk["candidates"][0]["content"]["parts"]:
            last = parts[-1] if parts else None
            if (last is not None and "text" in last and "text" in part and "thoughtSignature" not in part
                    and last.get("thought") == part.get("thought")):  # fmt: skip
                last["text"] += part["text"]
            else:
                parts.append(copy.deepcopy(part))
    folded = copy.deepcopy(chunks[-1])
    folded["candidates"][0]["content"]["parts"] = parts
    return folded


def generate(url: str, request: dict[str, Any], model: str = "test-model", **options: Any) -> httpx.Response:
    return httpx.post(f"{url}{path('generateContent', model)}", json=request,
                      headers={**HEADERS, **options.pop("headers", {})}, timeout=60, **options)  # fmt: skip


def without_nonces(response: dict[str, Any]) -> dict[str, Any]:
    """A response without what differs between two runs (its id, the signatures' nonces)."""
    response = copy.deepcopy(response)
    response.pop("responseId")
    for part in response["candidates"][0]["content"]["parts"]:
        if "thoughtSignature" in part:
            part["thoughtSignature"] = "signed"
    return response


def client(url: str, api_key: str = "test", **options: Any) -> genai.Client:
    """The SDK's client (kept in a variable while used: a collected client closes its connections)."""
    return genai.Client(api_key=api_key, http_options=types.HttpOptions(base_url=url, **options))


NO_AUTOMATIC_CALLS = types.AutomaticFunctionCallingConfig(disable=True)


# --- the stream and the response ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["llamacpp_reasoning_text", "vllm_reasoning_tool", "openai_parallel_tools",
                                  "llamacpp_parallel_tools", "openai_refusal", "llamacpp_length"])  # fmt: skip
@pytest.mark.parametrize("sse", [True, False])
def test_stream_folds_into_the_response(server, name, sse):
    server.upstream.push(exchange(name), exchange(name))
    request = body(tools=[WEATHER], generationConfig={"thinkingConfig": {"includeThoughts": True}})
    chunks = stream(server.url, request, sse=sse)
    answer = generate(server.url, request)
    assert answer.status_code == 200, answer.text
    response = answer.json()
    check_response(response)
    assert without_nonces(response) == without_nonces(fold(chunks))
    candidate = response["candidates"][0]
    parts = candidate["content"]["parts"]
    assert candidate["finishReason"] == ("MAX_TOKENS" if name == "llamacpp_length" else "STOP")
    if name in ("vllm_reasoning_tool", "llamacpp_reasoning_text"):
        assert parts[0]["thought"] is True and parts[0]["text"], "thoughts shown with includeThoughts"
        assert "thoughtSignature" in parts[1], "the part after the thoughts carries their signature"
    calls = [part["functionCall"] for part in parts if "functionCall" in part]
    if "tools" in name or "tool" in name:
        assert calls and all(call["name"] and isinstance(call["args"], dict) and call["id"] for call in calls)
    usage = response["usageMetadata"]
    assert usage["promptTokenCount"] > 0 and usage["totalTokenCount"] >= usage["promptTokenCount"]
    assert response["modelVersion"] == "test-model"


def test_the_sdk_generates_and_streams(server):
    sdk = client(server.url)
    server.upstream.push(text_exchange("Hello from the engine.", reasoning="Say hello."))
    response = sdk.models.generate_content(model="test-model", contents="hi")
    assert response.text == "Hello from the engine."
    assert [part.thought for part in response.candidates[0].content.parts] == [None], "no thoughts unless asked"
    assert response.candidates[0].content.parts[0].thought_signature, "but their signature"
    assert response.usage_metadata.prompt_token_count == 10 and response.candidates[0].finish_reason == "STOP"

    server.upstream.push(text_exchange("streamed words", reasoning="Think first."))
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
    chunks = list(sdk.models.generate_content_stream(model="models/test-model", contents="go", config=config))
    thoughts = "".join(part.text for chunk in chunks for part in chunk.candidates[0].content.parts or () if part.thought)
    texts = "".join(part.text for chunk in chunks for part in chunk.candidates[0].content.parts or () if not part.thought)
    assert thoughts == "Think first." and texts == "streamed words"
    assert chunks[-1].candidates[0].finish_reason == "STOP" and chunks[-1].usage_metadata.total_token_count == 15
    assert server.upstream.requests[-1]["model"] == "test-model", "`models/` in the name is read off"


def test_a_function_call_round_trip_with_the_sdk(server):
    sdk = client(server.url)
    server.upstream.push(tool_call_exchange("get_weather", {"city": "Paris"}, reasoning="I should look it up."),
                         text_exchange("Sunny in Paris."))  # fmt: skip

    def get_weather(city: str) -> str:
        """The weather of a city."""
        return f"sunny in {city}"

    config = types.GenerateContentConfig(tools=[get_weather], automatic_function_calling=NO_AUTOMATIC_CALLS)
    history: list[Any] = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])]
    first = sdk.models.generate_content(model="test-model", contents=history, config=config)
    (call,) = first.function_calls
    assert call.name == "get_weather" and call.args == {"city": "Paris"} and call.id == "call_1"
    assert first.candidates[0].content.parts[0].thought_signature, "the call carries the reasoning's signature"
    history += [first.candidates[0].content, types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_weather", response={"output": "sunny, 24C"})])]  # fmt: skip
    second = sdk.models.generate_content(model="test-model", contents=history, config=config)
    assert second.text == "Sunny in Paris."
    sent = server.upstream.requests[-1]
    offered = server.upstream.requests[0]["tools"][0]["function"]
    assert offered["name"] == "get_weather" and offered["parameters"]["properties"]["city"]["type"] == "string"
    assistant, result = sent["messages"][1], sent["messages"][2]
    assert assistant["reasoning_content"] == "I should look it up.", "the signature brought the reasoning back"
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert result == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"}

    server.upstream.push(tool_call_exchange("get_weather", {"city": "Oslo"}))
    chunks = list(sdk.models.generate_content_stream(model="test-model", contents="Weather in Oslo?", config=config))
    calls = [part.function_call for chunk in chunks for part in chunk.candidates[0].content.parts or ()
             if part.function_call]  # fmt: skip
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Oslo"})]


def test_the_javascript_sdk(server):
    """@google/genai (tests/js/genai.mjs): generateContent and generateContentStream through a call
    and its response, countTokens, the models API, and an error."""
    server.upstream.responder = lambda request: (
        text_exchange("It is sunny and 21C in Paris.") if request["messages"][-1]["role"] == "tool"
        else tool_call_exchange("get_weather", {"city": "Paris"}, reasoning="Look it up.",
                                call_id=f"call_{len(server.upstream.requests)}"))  # fmt: skip
    done = subprocess.run(["node", str(JS / "genai.mjs"), server.url], capture_output=True, text=True,
                          timeout=120, cwd=JS)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for mode in ("generate", "stream"):
        assert result[mode]["call"]["name"] == "get_weather" and result[mode]["call"]["args"] == {"city": "Paris"}
        assert result[mode]["text"] == "It is sunny and 21C in Paris."
    assert result["generate"]["thoughts"] == ["Look it up."] and result["generate"]["signed"]
    assert result["generate"]["finishReason"] == "STOP" and result["generate"]["usage"]["totalTokenCount"] == 15
    assert result["stream"]["finishReasons"] == ["STOP", "STOP"] and min(result["stream"]["chunks"]) >= 2
    assert result["tokens"] == 5
    assert result["models"] == {"listed": ["models/test-model"], "got": "models/test-model"}
    assert result["error"]["status"] == 404 and "NOT_FOUND" in result["error"]["message"]
    tool_turns = [request for request in server.upstream.requests if request["messages"][-1]["role"] == "tool"]
    assert len(tool_turns) == 2 and all(r["messages"][-2]["reasoning_content"] == "Look it up." for r in tool_turns)
    for request in tool_turns:
        call = request["messages"][-2]["tool_calls"][0]
        assert request["messages"][-1] == {"role": "tool", "tool_call_id": call["id"],
                                           "content": "sunny and 21C in Paris"}  # fmt: skip


# --- thought signatures ---------------------------------------------------------------------------


def test_thoughts_hidden_or_shown_and_their_signature_on_the_next_part(server):
    server.upstream.push(tool_call_exchange("get_weather", {"city": "Oslo"}, reasoning="Oslo needs a lookup."))
    chunks = stream(server.url, body(tools=[WEATHER]))
    parts = fold(chunks)["candidates"][0]["content"]["parts"]
    assert [list(part) for part in parts] == [["functionCall", "thoughtSignature"]], "no thought part unless asked"

    server.upstream.push(text_exchange("", reasoning="Only thinking."))
    response = generate(server.url, body(generationConfig={"thinkingConfig": {"includeThoughts": True}})).json()
    check_response(response)
    parts = response["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "Only thinking.", "thought": True}
    assert parts[1]["text"] == "" and parts[1]["thoughtSignature"], "nothing after the thoughts: an empty signed part"


def test_a_replayed_signature_brings_the_reasoning_back(server, caplog):
    server.upstream.push(tool_call_exchange("get_weather", {"city": "Oslo"}, reasoning="Oslo needs a lookup."))
    config = {"thinkingConfig": {"includeThoughts": True}}
    turn = generate(server.url, body("Weather?", tools=[WEATHER], generationConfig=config)).json()
    model_turn = turn["candidates"][0]["content"]
    call = model_turn["parts"][1]["functionCall"]
    answer = {"role": "user", "parts": [{"functionResponse": {"id": call["id"], "name": "get_weather",
                                                              "response": {"output": "-3C"}}}]}  # fmt: skip
    for parts in (model_turn["parts"], model_turn["parts"][1:]):  # with the thought part, and as Gemini CLI keeps it
        server.upstream.push(text_exchange("It is cold."))
        history = [body("Weather?")["contents"][0], {"role": "model", "parts": parts}, answer]
        assert generate(server.url, {"contents": history, "tools": [WEATHER]}).status_code == 200
        assistant = server.upstream.requests[-1]["messages"][1]
        assert assistant["reasoning_content"] == "Oslo needs a lookup.", "once, though two parts may say it"
        assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}

    # The SDKs send a signature back in either base64 alphabet, with or without padding.
    signature = model_turn["parts"][1]["thoughtSignature"]
    standard = base64.b64encode(base64.urlsafe_b64decode(signature)).decode().rstrip("=")
    server.upstream.push(text_exchange("Still cold."))
    history = [body("Weather?")["contents"][0], {"role": "model", "parts": [
        {"functionCall": call, "thoughtSignature": standard}]}, answer]  # fmt: skip
    generate(server.url, {"contents": history, "tools": [WEATHER]})
    assert server.upstream.requests[-1]["messages"][1]["reasoning_content"] == "Oslo needs a lookup."
    assert "not this server's" not in caplog.text


@pytest.mark.parametrize("signature", ["skip_thought_signature_validator", "c2lnbmF0dXJlLWJsb2I=", "tampered"])
def test_placeholder_foreign_and_tampered_signatures(server, signature, caplog):
    if signature == "tampered":
        server.upstream.push(text_exchange("x", reasoning="secret"))
        sealed = generate(server.url, body()).json()["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
        signature = sealed[:-8] + ("AAAA" if sealed[-8:-4] != "AAAA" else "BBBB") + sealed[-4:]
    server.upstream.push(text_exchange("Go on."))
    history = [body()["contents"][0],
               {"role": "model", "parts": [{"text": "forged thought", "thought": True, "thoughtSignature": signature},
                                           {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}},
                                            "thoughtSignature": signature}]},
               {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "ok"}}}]}]  # fmt: skip
    assert generate(server.url, {"contents": history, "tools": [WEATHER]}).status_code == 200
    assistant = server.upstream.requests[-1]["messages"][1]
    assert "reasoning_content" not in assistant and "forged" not in json.dumps(assistant), "no reasoning from it"
    placeholder = signature == "skip_thought_signature_validator"
    assert ("not this server's" in caplog.text) is not placeholder, "Google's placeholder is accepted quietly"


# --- the request reaching the engine ----------------------------------------------------------------


def test_the_request_reaches_the_engine_translated(server, caplog):
    server.upstream.push(text_exchange("ok"))
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
    pdf = base64.b64encode(pdf_with_text("Quarterly revenue rose")).decode()
    notes = base64.b64encode(b"plain notes").decode()
    contents = [
        {"role": "user", "parts": [
            {"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": png}},
            {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/a.jpg"}},
            {"inline_data": {"mime_type": "text/plain", "data": notes}},
            {"inlineData": {"mimeType": "application/pdf", "data": pdf, "displayName": "report.pdf"}},
            {"executableCode": {"language": "PYTHON", "code": "print(1)"}}, "not a part"]},
        {"role": "model", "parts": [{"text": "calling"}, {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
                                    {"codeExecutionResult": {"outcome": "OUTCOME_OK"}}]},
        {"role": "function", "parts": [{"functionResponse": {"name": "get_weather", "response": {"error": "timeout"}}}]},
        {"parts": [{"text": "and now?"}]},
        {"role": "narrator", "parts": [{"text": "odd"}]},
        {"nonsense": True},
    ]  # fmt: skip
    config = {"temperature": 0.2, "topP": 0.9, "topK": 40, "maxOutputTokens": 321, "stopSequences": ["END"], "seed": 7,
              "presencePenalty": 0.5, "candidateCount": 1, "thinkingConfig": {"thinkingBudget": 0},
              "responseMimeType": "application/json",
              "responseSchema": {"type": "OBJECT", "properties": {"answer": {"type": "STRING", "nullable": True},
                                 "count": {"type": "INTEGER", "format": "int32", "minimum": 0},
                                 "tags": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["a", "b"]},
                                          "minItems": "1"}},
                                 "required": ["answer"], "propertyOrdering": ["count", "answer", "tags"]}}  # fmt: skip
    request = {"contents": contents, "systemInstruction": {"role": "user", "parts": [{"text": "You help."}]},
               "tools": [WEATHER, {"codeExecution": {}}], "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
               "generationConfig": config, "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT",
                                                              "threshold": "BLOCK_NONE"}]}  # fmt: skip
    answer = generate(server.url, request, params={"key": "in-the-query"}, headers={"x-goog-api-key": ""})
    assert answer.status_code == 200, answer.text
    sent = server.upstream.requests[-1]
    assert sent["messages"][0] == {"role": "system", "content": "You help."}
    user = sent["messages"][1]["content"]
    assert user[0] == {"type": "text", "text": "look"}
    assert user[1]["image_url"]["url"] == f"data:image/png;base64,{png}"
    assert user[2]["image_url"]["url"] == "https://example.com/a.jpg"
    assert "plain notes" in user[3]["text"] and "Quarterly revenue rose" in user[4]["text"]
    assert "report.pdf" in user[4]["text"] and len(user) == 5, "the odd parts are skipped"
    assistant = sent["messages"][2]
    assert assistant["content"] == "calling" and assistant["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city": "Rome"}'}
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"],
                                   "content": "Error: timeout"}  # fmt: skip
    assert sent["messages"][4] == {"role": "user", "content": "and now?"} and len(sent["messages"]) == 5
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["get_weather"], "code execution left out"
    assert sent["tools"][0]["function"]["parameters"] == {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}  # fmt: skip
    assert sent["tool_choice"] == "required"
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["stop"], sent["seed"]) == (0.2, 0.9, 321, ["END"], 7)
    assert sent["presence_penalty"] == 0.5 and sent["reasoning_effort"] == "low", "the nearest level it accepts"
    assert sent["chat_template_kwargs"]["enable_thinking"] is False and sent["reasoning_budget_tokens"] == 0
    schema = sent["response_format"]["json_schema"]["schema"]
    assert sent["response_format"]["type"] == "json_schema"
    assert schema == {"type": "object", "properties": {
        "count": {"type": "integer", "format": "int32", "minimum": 0},
        "answer": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1}},
        "required": ["answer"]}  # fmt: skip
    assert list(schema["properties"]) == ["count", "answer", "tags"], "in propertyOrdering's order"
    assert "leaving out the codeExecution tool" in caplog.text and "skipping content 5" in caplog.text


def test_an_image_never_breaks_a_text_only_model(server):
    """An inlineData image goes through the attachments path: a model that refuses images gets a
    note in its place, on this turn and on every replay of it."""
    server.upstream.refuses_images = True
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
    turn = {"role": "user", "parts": [{"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": png}}]}
    server.upstream.push(text_exchange("I cannot see images."), text_exchange("Still text."))
    first = generate(server.url, {"contents": [turn]})
    assert first.status_code == 200 and check_response(first.json()).text == "I cannot see images."
    history = [turn, first.json()["candidates"][0]["content"], body("And now?")["contents"][0]]
    assert generate(server.url, {"contents": history}).status_code == 200
    user = server.upstream.requests[-1]["messages"][0]["content"]
    assert "reads text only" in json.dumps(user) and "image_url" not in json.dumps(user)


@pytest.mark.parametrize(("config", "offered", "expected"), [
    ({"mode": "AUTO"}, ["get_weather", "get_time"], "auto"),
    ({"mode": "none"}, [], None),  # no tools sent at all
    ({"mode": "VALIDATED"}, ["get_weather", "get_time"], "auto"),
    ({"mode": "ANY", "allowedFunctionNames": ["get_time"]}, ["get_time"], {"type": "function", "function": {"name": "get_time"}}),
    ({"mode": "ANY", "allowedFunctionNames": ["get_time", "get_weather"]}, ["get_weather", "get_time"], "required"),
])  # fmt: skip
def test_function_calling_config(server, config, offered, expected):
    server.upstream.push(text_exchange("ok"))
    declarations = [*WEATHER["functionDeclarations"], {"name": "get_time", "parametersJsonSchema": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}]  # fmt: skip
    request = body(tools=[{"functionDeclarations": declarations}], toolConfig={"functionCallingConfig": config})
    assert generate(server.url, request).status_code == 200
    sent = server.upstream.requests[-1]
    assert sent.get("tool_choice") == expected
    assert [tool["function"]["name"] for tool in sent.get("tools") or ()] == offered
    if "get_time" in offered:
        assert sent["tools"][-1]["function"]["parameters"] == {"type": "object", "properties": {"zone": {"type": "string"}}}


@pytest.mark.parametrize(("thinking", "effort", "tokens"), [
    ({"thinkingBudget": 0}, "low", 0), ({"thinkingBudget": -1}, None, None), ({"thinkingBudget": 1024}, "low", 1024),
    ({"thinkingBudget": 8192}, "medium", 8192), ({"thinkingBudget": 24576}, "high", 24576),
    ({"thinkingLevel": "LOW"}, "low", 1024), ({"thinkingLevel": "high"}, "high", 16384),
    ({"thinkingLevel": "MINIMAL"}, "low", 512), ({"includeThoughts": True}, None, None),
])  # fmt: skip
def test_thinking_config(server, thinking, effort, tokens):
    """The level as the engine's model accepts it (`none` as thinking off), the budget in llama.cpp's field."""
    server.upstream.push(text_exchange("ok"))
    assert generate(server.url, body(generationConfig={"thinkingConfig": thinking})).status_code == 200
    sent = server.upstream.requests[-1]
    assert sent.get("reasoning_effort") == effort and sent.get("reasoning_budget_tokens") == tokens


def test_json_without_a_schema_and_a_json_schema_as_given(server):
    server.upstream.push(text_exchange('{"a": 1}'), text_exchange('{"a": 1}'))
    generate(server.url, body(generationConfig={"responseMimeType": "application/json"}))
    assert server.upstream.requests[-1]["response_format"] == {"type": "json_object"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    generate(server.url, body(generationConfig={"responseMimeType": "application/json", "responseJsonSchema": schema}))
    assert server.upstream.requests[-1]["response_format"]["json_schema"]["schema"] == schema


def test_function_responses_pair_with_their_calls(server):
    """By id where the client kept it, else by name, else in order; a response to no call reads as text."""
    server.upstream.push(text_exchange("ok"))
    contents = [
        body("go")["contents"][0],
        {"role": "model", "parts": [{"functionCall": {"id": "own-1", "name": "a", "args": {}}},
                                    {"functionCall": {"name": "b", "args": {"x": 1}}},
                                    {"functionCall": {"name": "c", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "b", "id": "client-made", "response": {"v": "B"}}},
                                   {"functionResponse": {"id": "own-1", "name": "a", "response": {"output": "A"}}},
                                   {"functionResponse": {"name": "renamed", "response": {"output": "C"}}},
                                   {"functionResponse": {"name": "late", "response": {"output": "D"}}},
                                   {"text": "continue"}]},
    ]  # fmt: skip
    assert generate(server.url, {"contents": contents}).status_code == 200
    messages = server.upstream.requests[-1]["messages"]
    ids = [call["id"] for call in messages[1]["tool_calls"]]
    assert ids[0] == "own-1" and ids[1] != ids[2] and all(ids)
    results = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    assert results == [(ids[1], '{"v": "B"}'), ("own-1", "A"), (ids[2], "C")]
    assert messages[-2:] == [{"role": "user", "content": "[result of late]\nD"}, {"role": "user", "content": "continue"}]


def test_a_malformed_call_ends_as_gemini_s_do(server):
    server.upstream.push(json.loads(json.dumps(FAULTS["invalid_tool_arguments"][0])))
    chunks = stream(server.url, body(tools=[WEATHER]))
    last = chunks[-1]["candidates"][0]
    assert last["finishReason"] == "MALFORMED_FUNCTION_CALL" and "get_weather" in last["finishMessage"]
    assert not any("functionCall" in part for chunk in chunks for part in chunk["candidates"][0]["content"]["parts"])


# --- errors ------------------------------------------------------------------------------------------


def test_errors_before_the_stream(server):
    url = server.url
    check_error(httpx.post(f"{url}{path('generateContent')}", json={"contents": []}).json(), 400, "INVALID_ARGUMENT")
    for request in (body(generationConfig={"candidateCount": 2}), body(generationConfig={"temperature": 3}),
                    body(generationConfig={"thinkingConfig": {"thinkingBudget": 10, "thinkingLevel": "LOW"}}),
                    body(generationConfig={"thinkingConfig": {"thinkingLevel": "EXTREME"}}),
                    body(generationConfig={"responseMimeType": "image/png"}),
                    body(generationConfig={"responseSchema": {"type": "STRING"}}),
                    body(tools=[{"functionDeclarations": [{"description": "nameless"}]}]),
                    body(tools=[{"functionDeclarations": [{"name": "f", "parameters": {"type": "WIDGET"}}]}]),
                    body(tools=[WEATHER, WEATHER]), body(toolConfig={"functionCallingConfig": {"mode": "SOMETIMES"}}),
                    body(toolConfig={"functionCallingConfig": {"mode": "ANY"}}),
                    body(tools=[WEATHER], toolConfig={"functionCallingConfig": {"allowedFunctionNames": ["nope"]}}),
                    body(cachedContent="cachedContents/abc"), {"contents": [{"role": "model", "parts": []}]}):  # fmt: skip
        answer = generate(url, request)
        assert answer.status_code == 400, request
        check_error(answer.json(), 400, "INVALID_ARGUMENT")
    message = check_error(generate(url, body(), model="unknown-model").json(), 404, "NOT_FOUND")
    assert "unknown-model" in message
    check_error(httpx.post(f"{url}{path('generateContent')}", content=b"{nope", headers=HEADERS).json(), 400,
                "INVALID_ARGUMENT")  # fmt: skip
    check_error(httpx.post(f"{url}{path('streamGenerateContent')}?alt=proto", json=body()).json(), 400, "INVALID_ARGUMENT")
    check_error(httpx.get(f"{url}/v1beta/nothing").json(), 404, "NOT_FOUND")
    check_error(httpx.post(f"{url}/v1beta/models/:generateContent", json=body()).json(), 400, "INVALID_ARGUMENT")
    sdk = client(url)
    with pytest.raises(genai_errors.ClientError) as raised:
        sdk.models.generate_content(model="unknown-model", contents="x")
    assert raised.value.code == 404 and raised.value.status == "NOT_FOUND"


def test_an_engine_error_inside_the_stream(server):
    for sse in (True, False):
        server.upstream.push(exchange("llamacpp_error_midstream"))
        chunks = stream(server.url, body(), sse=sse)
        message = check_error(chunks[-1], 502, "UNAVAILABLE")
        assert message == "Failed to decode the batch: KV cache is full"
    server.upstream.push(exchange("llamacpp_error_midstream"))
    sdk = client(server.url)
    with pytest.raises(genai_errors.ServerError) as raised:
        list(sdk.models.generate_content_stream(model="test-model", contents="hi"))
    assert raised.value.code == 502


@pytest.fixture
def faulty(upstream, database_url, unused_port):
    upstream.time_scale = 1.0
    settings = Settings(upstreams=_upstreams(upstream, unused_port), probe=False, database_url=database_url)
    with serve(create_app(settings)) as url:
        yield url, upstream


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_engine_fault_ends_the_stream(faulty, fault):
    url, upstream = faulty
    script, status, _, http_status = FAULTS[fault]
    model = "dead-model" if script is None else "test-model"
    malformed = fault == "invalid_tool_arguments"  # Gemini's answer to that is MALFORMED_FUNCTION_CALL
    for streaming in (True, False):
        if script is not None:
            upstream.push(json.loads(json.dumps(script)))
        request = body(tools=[WEATHER])
        if streaming:
            chunks = stream(url, request, model)
            assert ("error" in chunks[-1]) == (status == "failed" and not malformed), fault
        else:
            answer = generate(url, request, model)
            if status == "failed" and not malformed:
                assert answer.status_code == http_status, fault
                check_error(answer.json(), http_status, "RESOURCE_EXHAUSTED" if http_status == 429 else
                            "INVALID_ARGUMENT" if http_status == 400 else "DEADLINE_EXCEEDED" if http_status == 504
                            else "UNAVAILABLE")  # fmt: skip
            else:
                assert answer.status_code == 200
                check_response(answer.json())


def test_keys_in_every_place_google_s_clients_put_them(upstream, database_url, caplog):
    caplog.set_level(logging.INFO)
    access = logging.getLogger(ACCESS_LOGGER)  # its lines do not propagate (a plain handler of its own)
    access.addHandler(caplog.handler)
    try:
        _keys_in_every_place(upstream, database_url)
        wait_for(lambda: "key=REDACTED" in caplog.text)
    finally:
        access.removeHandler(caplog.handler)
    assert "sk-right" not in caplog.text, "a key in the query never reaches the log"


def _keys_in_every_place(upstream, database_url) -> None:
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        api_keys=["sk-right"], max_body_bytes=4096)  # fmt: skip
    upstream.responder = lambda request: text_exchange("ok")
    with serve(create_app(settings)) as url:
        target = f"{url}{path('generateContent')}"
        check_error(httpx.post(target, json=body()).json(), 401, "UNAUTHENTICATED")
        check_error(httpx.post(target, json=body(), headers={"x-goog-api-key": "wrong"}).json(), 401, "UNAUTHENTICATED")
        assert httpx.post(target, json=body(), headers={"x-goog-api-key": "sk-right"}).status_code == 200
        assert httpx.post(target, json=body(), params={"key": "sk-right"}).status_code == 200
        assert httpx.post(target, json=body(), headers={"authorization": "Bearer sk-right"}).status_code == 200
        assert httpx.get(f"{url}/v1beta/models", params={"key": "sk-right"}).status_code == 200
        check_error(httpx.get(f"{url}/v1beta/models").json(), 401, "UNAUTHENTICATED")
        assert httpx.post(f"{url}/v1/chat/completions", params={"key": "sk-right"}).status_code == 401, \
            "?key= only on the Gemini API's paths"  # fmt: skip
        big = body("x" * 5000)
        check_error(httpx.post(target, json=big, headers={"x-goog-api-key": "sk-right"}).json(), 413, "INVALID_ARGUMENT")
        sdk = client(url, api_key="wrong")
        with pytest.raises(genai_errors.ClientError) as raised:
            sdk.models.generate_content(model="test-model", contents="x")
        assert raised.value.code == 401


def test_limits_answer_resource_exhausted(upstream, database_url):
    upstream.responder = lambda request: text_exchange("ok")
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        api_keys=["sk-limited"], default_limits=LimitsConfig(rpm=1))  # fmt: skip
    left = 60 - time.time() % 60
    if left < 10:  # both requests in one minute's window
        time.sleep(left + 0.05)
    with serve(create_app(settings)) as url:
        headers = {"x-goog-api-key": "sk-limited"}
        assert generate(url, body(), headers=headers).status_code == 200
        refused = generate(url, body(), headers=headers)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        check_error(refused.json(), 429, "RESOURCE_EXHAUSTED")
        sdk = client(url, api_key="sk-limited")
        with pytest.raises(genai_errors.ClientError) as raised:
            sdk.models.generate_content(model="test-model", contents="x")
        assert raised.value.code == 429 and raised.value.status == "RESOURCE_EXHAUSTED"


# --- generated bodies ------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
PART = st.fixed_dictionaries({}, optional={
    "text": JSON, "thought": JSON, "thoughtSignature": JSON, "inlineData": JSON, "fileData": JSON,
    "functionCall": st.one_of(JSON, st.fixed_dictionaries({"name": JSON}, optional={"id": JSON, "args": JSON})),
    "functionResponse": st.one_of(JSON, st.fixed_dictionaries({"name": JSON}, optional={
        "id": JSON, "response": JSON, "parts": JSON})),
    "executableCode": JSON})  # fmt: skip
CONTENT = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["user", "model", "function", "system", "x", 3]),
    "parts": st.one_of(st.lists(st.one_of(PART, JSON), max_size=4), JSON)})  # fmt: skip
SCHEMA = st.recursive(st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["OBJECT", "STRING", "integer", "TYPE_UNSPECIFIED", "WIDGET", 5]), "nullable": JSON,
    "enum": JSON, "format": JSON, "minItems": st.one_of(JSON, st.just("3")), "propertyOrdering": JSON}),
    lambda children: st.fixed_dictionaries({"type": st.just("OBJECT")}, optional={
        "properties": st.dictionaries(st.text(max_size=5), children, max_size=3), "items": children,
        "anyOf": st.lists(children, max_size=2), "required": JSON}), max_leaves=8)  # fmt: skip
BODY = st.fixed_dictionaries({}, optional={
    "contents": st.one_of(st.lists(st.one_of(CONTENT, JSON), max_size=4), JSON),
    "systemInstruction": st.one_of(JSON, CONTENT),
    "tools": st.one_of(JSON, st.lists(st.fixed_dictionaries({}, optional={
        "functionDeclarations": st.one_of(JSON, st.lists(st.fixed_dictionaries({"name": JSON}, optional={
            "parameters": st.one_of(SCHEMA, JSON), "parametersJsonSchema": JSON, "description": JSON}), max_size=2)),
        "googleSearch": JSON, "urlContext": JSON, "codeExecution": JSON}), max_size=2)),
    "toolConfig": st.one_of(JSON, st.fixed_dictionaries({"functionCallingConfig": st.fixed_dictionaries({}, optional={
        "mode": st.sampled_from(["AUTO", "ANY", "NONE", "VALIDATED", "x", 1]), "allowedFunctionNames": JSON})})),
    "generationConfig": st.one_of(JSON, st.fixed_dictionaries({}, optional={
        "temperature": JSON, "topP": JSON, "topK": JSON, "maxOutputTokens": JSON, "candidateCount": JSON,
        "stopSequences": JSON, "responseMimeType": st.one_of(JSON, st.just("application/json")),
        "responseSchema": st.one_of(SCHEMA, JSON), "responseJsonSchema": JSON,
        "thinkingConfig": st.one_of(JSON, st.fixed_dictionaries({}, optional={
            "thinkingBudget": JSON, "thinkingLevel": JSON, "includeThoughts": JSON}))})),
    "safetySettings": JSON, "cachedContent": JSON, "generateContentRequest": JSON,
})  # fmt: skip


def test_generated_bodies_never_get_a_5xx(server):
    server.upstream.responder = lambda request: text_exchange("ok")
    http = httpx.Client(base_url=server.url, timeout=30)

    @hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(BODY, st.sampled_from(["generateContent", "streamGenerateContent?alt=sse", "streamGenerateContent",
                                  "countTokens"]))  # fmt: skip
    def check_body(request: dict, action: str) -> None:
        answer = http.post(f"/v1beta/models/test-model:{action}", json=request)
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            error = answer.json()["error"]
            assert set(error) == {"code", "message", "status"} and error["code"] == answer.status_code

    check_body()
    assert http.get("/v1beta/models").status_code == 200, "the server is still up"


# --- counting tokens ---------------------------------------------------------------------------------


def test_count_tokens_is_exact_on_an_in_process_model(engine_server):
    model = engine_server.app.state.router.engines[0].model
    request = {"contents": [{"role": "user", "parts": [{"text": "Name three colors."}]}],
               "systemInstruction": {"parts": [{"text": "Be brief."}]}, "tools": [WEATHER]}  # fmt: skip
    answer = httpx.post(f"{engine_server.url}{path('countTokens', model)}", json={"generateContentRequest": request},
                        timeout=60)  # fmt: skip
    assert answer.status_code == 200 and "x-responsekit-estimated" not in answer.headers
    count = check(types.CountTokensResponse, answer.json()).total_tokens
    messages = httpx.post(f"{engine_server.url}/v1/messages/count_tokens", timeout=60, json={
        "model": model, "system": "Be brief.", "messages": [{"role": "user", "content": "Name three colors."}],
        "tools": [{"name": "get_weather", "description": "The weather", "input_schema": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]}).json()  # fmt: skip
    assert count == messages["input_tokens"] and "estimated" not in messages
    sdk = client(engine_server.url)
    plain = sdk.models.count_tokens(model=model, contents="Name three colors.")
    assert 0 < plain.total_tokens < count
    response = generate(engine_server.url, {**request, "generationConfig": {"maxOutputTokens": 3}}, model).json()
    assert check_response(response).usage_metadata.prompt_token_count == count
    with httpx.stream("POST", f"{engine_server.url}{path('streamGenerateContent', model)}", params={"alt": "sse"},
                      json={**request, "generationConfig": {"maxOutputTokens": 64000}}, timeout=60) as clamped:  # fmt: skip
        assert 0 < int(clamped.headers["x-responsekit-max-tokens-clamped"]) < 4096, "more than the context leaves"
        # (leaving now stops the generation)


def test_count_tokens_elsewhere(server):
    # llama.cpp's /apply-template then /tokenize: "<|user|> one two three <|assistant|>" is five.
    answer = httpx.post(f"{server.url}{path('countTokens')}", json=body("one two three"), headers=HEADERS)
    assert answer.json() == {"totalTokens": 5}
    check(types.CountTokensResponse, answer.json())
    sdk = client(server.url)
    assert sdk.models.count_tokens(model="test-model", contents="one two three").total_tokens == 5
    for wrong in ({}, {"contents": []}, {**body(), "generateContentRequest": body()}):
        check_error(httpx.post(f"{server.url}{path('countTokens')}", json=wrong).json(), 400, "INVALID_ARGUMENT")


def test_count_tokens_is_marked_estimated_when_the_engine_cannot_count(database_url):
    engine = ScriptedUpstream(owned_by="somebody")
    with serve(engine.app) as engine_url:
        settings = Settings(upstreams=[UpstreamConfig(base_url=f"{engine_url}/v1")], probe=False,
                            database_url=database_url)  # fmt: skip
        with serve(create_app(settings)) as url:
            answer = httpx.post(f"{url}{path('countTokens')}", json=body("one two three"))
    assert answer.headers["x-responsekit-estimated"] == "true" and answer.json()["totalTokens"] > 0


# --- models ------------------------------------------------------------------------------------------------


def test_the_models_api(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        aliases={"gemini-2.5-pro": "test-model"}, default_model="test-model")  # fmt: skip
    with serve(create_app(settings)) as url:
        page = httpx.get(f"{url}/v1beta/models", headers=HEADERS).json()
        check_keys(types.ListModelsResponse, {**page, "models": None}, "ListModelsResponse")
        assert [check_model(model).name for model in page["models"]] == ["models/test-model", "models/gemini-2.5-pro"]
        assert "nextPageToken" not in page
        first = httpx.get(f"{url}/v1beta/models", params={"pageSize": 1}).json()
        second = httpx.get(f"{url}/v1beta/models", params={"pageSize": 1, "pageToken": first["nextPageToken"]}).json()
        assert [m["name"] for m in first["models"] + second["models"]] == [m["name"] for m in page["models"]]
        one = httpx.get(f"{url}/v1beta/models/test-model").json()
        assert check_model(one).display_name == "test-model" and one == page["models"][0]
        assert httpx.get(f"{url}/v1beta/models/models/test-model").json() == one
        assert check_model(httpx.get(f"{url}/v1beta/models/gemini-2.0-flash").json()).name == "models/gemini-2.0-flash", \
            "a name the default model serves"  # fmt: skip

        sdk = client(url)
        assert [model.name for model in sdk.models.list()] == ["models/test-model", "models/gemini-2.5-pro"]
        assert sdk.models.get(model="gemini-2.5-pro").supported_actions == [
            "generateContent", "streamGenerateContent", "countTokens"]
        upstream.push(text_exchange("aliased"))
        assert sdk.models.generate_content(model="gemini-2.5-pro", contents="hi").text == "aliased"
        assert upstream.requests[-1]["model"] == "test-model"

        # The SDKs with api_version v1 ask /v1/models…, which OpenAI's clients ask too.
        v1 = client(url, api_version="v1")
        assert [model.name for model in v1.models.list()] == ["models/test-model", "models/gemini-2.5-pro"]
        assert v1.models.get(model="test-model").name == "models/test-model"
        upstream.push(text_exchange("on v1"))
        assert v1.models.generate_content(model="test-model", contents="hi").text == "on v1"
        assert httpx.get(f"{url}/v1/models").json()["object"] == "list", "OpenAI's list for the others"
        assert httpx.get(f"{url}/v1/models/test-model").json()["object"] == "model"
        upstream.push(text_exchange("doubled"))
        doubled = client(f"{url}/v1")
        assert doubled.models.generate_content(model="test-model", contents="x").text == "doubled"


def test_model_token_limits_where_the_engine_knows_them(engine_server):
    model = engine_server.app.state.router.engines[0].model
    found = check_model(httpx.get(f"{engine_server.url}/v1beta/models/{model}").json())
    window = engine_server.app.state.router.engines[0].context_window(model)
    assert found.input_token_limit == found.output_token_limit == window > 0


def test_a_key_limited_to_some_models_sees_those_only(upstream, database_url):
    admin = "admin-secret"
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        admin_api_keys=[admin], aliases={"other": "test-model"})  # fmt: skip
    with serve(create_app(settings)) as url:
        made = httpx.post(f"{url}/admin/v1/api-keys", headers={"Authorization": f"Bearer {admin}"},
                          json={"name": "narrow", "models": ["other"]}).json()  # fmt: skip
        headers = {"x-goog-api-key": made["key"]}
        page = httpx.get(f"{url}/v1beta/models", headers=headers).json()
        assert [model["name"] for model in page["models"]] == ["models/other"]
        check_error(httpx.get(f"{url}/v1beta/models/test-model", headers=headers).json(), 404, "NOT_FOUND")
        check_error(generate(url, body(), headers=headers).json(), 404, "NOT_FOUND")


# --- built-in tools: googleSearch and urlContext ---------------------------------------------------------


@pytest.fixture
def web(upstream, database_url, tmp_path):
    """A server with a search engine (SearXNG's API on loopback) and a site it finds pages on."""
    site = Site()
    with serve(site.app) as site_url:
        site.url = site_url
        engine = SearchEngine(site)
        with serve(engine.app) as engine_url:
            settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,
                                data_dir=tmp_path, database_url=database_url, allowed_hosts=["127.0.0.1"],
                                web_search_provider="searxng", web_search_url=engine_url)  # fmt: skip
            with serve(create_app(settings)) as url:
                yield Server(url, upstream), site, engine


def test_google_search_grounds_the_answer(web):
    """The answer's text without the marks the model wrote; each cited claim a support, as Gemini's."""
    server, site, engine = web
    answer = "Ätna erupts every few years [1]. Stromboli, almost always [2][3].\nNothing else [9]."
    shown = "Ätna erupts every few years. Stromboli, almost always.\nNothing else [9]."
    for streaming in (True, False):
        server.upstream.responder = searching(("web_search", {"query": "most active volcano"}), answer=answer)
        request = body("Which volcanoes are active?", tools=[{"googleSearch": {}}, WEATHER])
        if streaming:
            response = fold(stream(server.url, request))
        else:
            response = generate(server.url, request).json()
            check_response(response)
        candidate = response["candidates"][0]
        assert candidate["content"]["parts"] == [{"text": shown}], "the server's searches stay out of the parts"
        grounding = candidate["groundingMetadata"]
        assert grounding["webSearchQueries"] == ["most active volcano"]
        assert grounding["groundingChunks"] == [{"web": {"uri": url, "title": title}} for url, title, _ in engine._results()]
        first, second = grounding["groundingSupports"]
        claim = "Ätna erupts every few years"
        assert first == {"segment": {"startIndex": 0, "endIndex": len(claim.encode()), "text": claim},
                         "groundingChunkIndices": [0]}, "offsets in UTF-8 bytes, as Google counts"  # fmt: skip
        start = len(shown[: shown.index("Stromboli")].encode())
        claim = "Stromboli, almost always"
        assert second == {"segment": {"startIndex": start, "endIndex": start + len(claim.encode()), "text": claim},
                          "groundingChunkIndices": [1, 2]}  # fmt: skip
        assert "urlContextMetadata" not in candidate
        offered = [tool["function"]["name"] for tool in server.upstream.requests[-2]["tools"]]
        assert offered == ["get_weather", "web_search", "web_open_page", "web_find_in_page"]
        assert engine.requests[-1]["params"]["q"] == "most active volcano"

    # Marks split across the engine's pieces are taken out all the same; text after them is not held.
    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Etna is active [1]. Yes [")
    chunks = stream(server.url, body("Is Etna active?", tools=[{"googleSearch": {}}]))
    assert fold(chunks)["candidates"][0]["content"]["parts"] == [{"text": "Etna is active. Yes ["}]

    server.upstream.responder = searching(("web_search", {"query": "etna"}), answer="Etna is active [1].")
    sdk = client(server.url)
    config = types.GenerateContentConfig(tools=[types.Tool(google_search=types.GoogleSearch())])
    response = sdk.models.generate_content(model="test-model", contents="Is Etna active?", config=config)
    grounding = response.candidates[0].grounding_metadata
    assert response.text == "Etna is active." and grounding.web_search_queries == ["etna"]
    assert grounding.grounding_chunks[0].web.uri == f"{site.url}/etna.html"
    assert grounding.grounding_supports[0].segment.text == "Etna is active"


def test_url_context_reads_the_prompt_s_pages(web):
    server, site, _ = web
    page, elsewhere = f"{site.url}/etna.html", "https://made-up.example.com/page"
    server.upstream.responder = searching(("web_fetch", {"url": page}), ("web_fetch", {"url": elsewhere}),
                                          answer="The page says Etna is active.")  # fmt: skip
    chunks = stream(server.url, body(f"Summarize {page}", tools=[{"urlContext": {}}]))
    candidate = fold(chunks)["candidates"][0]
    assert candidate["content"]["parts"] == [{"text": "The page says Etna is active."}]
    assert candidate["urlContextMetadata"] == {"urlMetadata": [
        {"retrievedUrl": page, "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_SUCCESS"},
        {"retrievedUrl": elsewhere, "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_ERROR"}]}, \
        "only URLs of the conversation are read"  # fmt: skip
    read, refused = [m["content"] for m in server.upstream.requests[-1]["messages"] if m["role"] == "tool"]
    assert "one of the most active volcanoes" in read and "not in the conversation" in refused
    assert [t["function"]["name"] for t in server.upstream.requests[0]["tools"]] == ["web_fetch"]


@pytest.mark.parametrize("streamed", [True, False])
def test_an_unexpected_error_in_a_built_in_tool_is_read_by_the_model(web, monkeypatch, streamed):
    """A search and a page read that raise what they never should: the model reads each failure, the
    answer comes, the metadata says what failed."""
    server, site, _ = web
    break_web(monkeypatch)
    page = f"{site.url}/etna.html"
    server.upstream.responder = searching(("web_search", {"query": "etna"}), ("web_fetch", {"url": page}),
                                          answer="Nothing could be read.")  # fmt: skip
    request = body(f"Summarize {page}", tools=[{"googleSearch": {}}, {"urlContext": {}}])
    if streamed:
        response = fold(stream(server.url, request))
    else:
        answer = generate(server.url, request)
        assert answer.status_code == 200, answer.text
        response = answer.json()
        check_response(response)
    candidate = response["candidates"][0]
    assert candidate["content"]["parts"] == [{"text": "Nothing could be read."}] and candidate["finishReason"] == "STOP"
    assert candidate["groundingMetadata"]["webSearchQueries"] == ["etna"]
    assert candidate["urlContextMetadata"] == {"urlMetadata": [
        {"retrievedUrl": page, "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_ERROR"}]}  # fmt: skip
    search, fetched = [m["content"] for m in server.upstream.requests[-1]["messages"] if m["role"] == "tool"]
    assert search.startswith("Error: The web search failed: Searching raised an unexpected error") and "RuntimeError" in search
    assert fetched.startswith("Error: The page could not be read: ") and LXML_GONE in fetched


def test_without_a_search_engine_the_built_in_tools_are_left_out(server, caplog):
    server.upstream.push(text_exchange("From memory."))
    response = generate(server.url, body("Etna?", tools=[{"googleSearch": {}}, {"urlContext": {}}])).json()
    assert check_response(response).text == "From memory."
    assert "tools" not in server.upstream.requests[-1]
    assert "leaving out the googleSearch tool: this server has no search engine configured" in caplog.text


# --- Gemini CLI's own requests ---------------------------------------------------------------------------


def gemini_cli_requests() -> dict[str, list[dict[str, Any]]]:
    """Every request Gemini CLI 0.61 sent in each recorded run (tests/data/gemini_cli_requests.json),
    its shared system instruction and tool lists put back in place."""
    data = json.loads((DATA / "gemini_cli_requests.json").read_text())

    def expand(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"$shared"}:
                return expand(data["shared"][node["$shared"]])
            return {key: expand(value) for key, value in node.items()}
        if isinstance(node, list):
            return [expand(value) for value in node]
        return node

    return {name: [expand(request) for request in run["requests"]] for name, run in data["exchanges"].items()}


@pytest.fixture
def cli_server(upstream, database_url):
    """A server whose default model serves every name Gemini CLI asks for (`gemini-3-flash-preview`…)."""
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        default_model="test-model")  # fmt: skip
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


def test_gemini_cli_s_requests(cli_server, caplog):
    """Each request Gemini CLI sent is answered, each answer and chunk checked, and reaches the engine
    as the model should read it: calls and their responses paired by Gemini CLI's own ids, its
    placeholder signatures taken quietly, the image of a tool result after it, the routing request's
    schema in lower case, the built-in search tool left out without a search engine."""
    server = cli_server
    server.upstream.responder = lambda request: text_exchange("Done.", reasoning="Thinking it over.")
    sent: dict[str, list[dict[str, Any]]] = {}
    for name, requests in gemini_cli_requests().items():
        caplog.clear()
        before = len(server.upstream.requests)
        for recorded in requests:
            headers = {key: value for key, value in recorded["headers"].items()
                       if key.lower() not in ("connection", "accept-encoding", "content-type")}  # fmt: skip
            target = f"{server.url}{recorded['path']}"
            if recorded["path"].endswith(":streamGenerateContent"):
                assert recorded["query"] == {"alt": "sse"}
                with httpx.stream("POST", target, params=recorded["query"], json=recorded["body"], headers=headers,
                                  timeout=60) as answer:  # fmt: skip
                    assert answer.status_code == 200, (name, answer.read())
                    chunks = read_sse(answer)
                for chunk in chunks:
                    check_response(chunk)
                assert fold(chunks)["candidates"][0]["content"]["parts"][-1]["text"] == "Done."
            else:
                answer = httpx.post(target, params=recorded["query"], json=recorded["body"], headers=headers, timeout=60)
                assert answer.status_code == 200, (name, answer.text)
                kind = types.CountTokensResponse if recorded["path"].endswith(":countTokens") else types.GenerateContentResponse
                check(kind, answer.json())
        sent[name] = server.upstream.requests[before:]
        signatures = {part.get("thoughtSignature") for request in requests for content in request["body"]["contents"]
                      for part in content["parts"]} - {None, "skip_thought_signature_validator"}  # fmt: skip
        assert ("not this server's" in caplog.text) == bool(signatures), name

    system = sent["plain"][0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are Gemini CLI")
    assert len(sent["plain"][0]["tools"]) > 5 and sent["plain"][0]["messages"][-1]["content"].endswith("Say hello")

    for name in ("shell_tool", "shell_tool_signed", "read_file_with_id"):
        assistant, result = sent[name][-1]["messages"][-2:]
        (call,) = assistant["tool_calls"]
        assert result == {"role": "tool", "tool_call_id": call["id"], "content": result["content"]} and result["content"]
        assert "reasoning_content" not in assistant, "a placeholder or foreign signature holds no reasoning"
    assert sent["read_file_with_id"][-1]["messages"][-2]["tool_calls"][0]["id"] == "call_abc123"

    tool, image = sent["read_image"][-1]["messages"][-2:]
    assert tool["role"] == "tool" and tool["content"] == "Binary content provided (1 item(s))."
    assert image["role"] == "user" and image["content"][-1]["image_url"]["url"].startswith("data:image/png;base64,")
    (turn,) = sent["at_image"]
    assert [part["type"] for part in turn["messages"][-1]["content"]][-3:] == ["text", "image_url", "text"]

    classifier, main = sent["auto_model"]
    schema = classifier["response_format"]["json_schema"]["schema"]
    assert schema["type"] == "object" and schema["properties"]["complexity_score"]["type"] == "integer"
    assert classifier["reasoning_effort"] == "high" and classifier["model"] == main["model"] == "test-model"

    helper = sent["web_search"][1]
    assert "tools" not in helper, "googleSearch is left out where no search engine is configured"
    assert sent["resumed"][-1]["messages"][-2] == {"role": "assistant", "content": "Signed answer."}
