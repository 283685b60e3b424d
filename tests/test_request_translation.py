"""What the engine receives for every kind of Responses input (checked on the wire)."""

from __future__ import annotations

import base64
import json
import logging

import httpx
import pytest

from .harness import check_response, text_exchange


def send(server, **body) -> dict:
    """POST a non-streaming request; returns the chat request the engine received."""
    server.upstream.push(text_exchange("ok"))
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return server.upstream.requests[-1]


def test_string_input_and_instructions(server):
    sent = send(server, input="Hello", instructions="Be brief.")
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "test-model"


def test_messages_in_every_shape(server):
    image = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    sent = send(server, input=[
        {"role": "system", "content": "sys one"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev two"}]},
        {"type": "message", "id": "msg_1", "role": "user", "content": [
            {"type": "input_text", "text": "look: "},
            {"type": "input_image", "image_url": image, "detail": "low"},
            {"type": "input_image", "image_url": "https://example.com/cat.png"},
        ]},
        {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "A cat.", "annotations": []}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I won't."}]},
        {"role": "user", "content": "thanks"},
    ])  # fmt: skip
    assert sent["messages"] == [
        {"role": "system", "content": "sys one\n\ndev two"},
        {"role": "user", "content": [
            {"type": "text", "text": "look: "},
            {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "auto"}},
        ]},
        {"role": "assistant", "content": "A cat."},
        {"role": "assistant", "content": "I won't."},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip


def test_input_file_is_text_with_its_filename(server):
    data = "data:text/plain;base64," + base64.b64encode(b"x,y\n1,2\n").decode()
    sent = send(server, input=[{"role": "user", "content": [
        {"type": "input_file", "filename": "table.csv", "file_data": data},
        {"type": "input_file", "filename": "blob.bin", "file_data": base64.b64encode(b"\xff\xfe\x00").decode()},
        {"type": "input_text", "text": "Sum it."},
    ]}])  # fmt: skip
    content = sent["messages"][0]["content"]
    assert content.startswith("[file table.csv]\nx,y\n1,2\n\n[end of file table.csv]")
    assert "[file blob.bin: binary content that cannot be shown as text]" in content
    assert content.endswith("Sum it.")


def test_tool_loop_history_with_reasoning(server):
    sent = send(server, tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}], input=[
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Two calls."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "get_weather", "arguments": "{\"city\":\"Tokyo\"}",
         "status": "completed"},
        {"type": "function_call_output", "call_id": "c1", "output": "18C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "25"},
                                                                     {"type": "input_text", "text": "C"}]},
        {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "Summarize both."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Paris 18C, Tokyo 25C."}]},
        {"role": "user", "content": "And Rome?"},
    ])  # fmt: skip
    assert sent["messages"] == [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": None, "reasoning_content": "Two calls.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Tokyo\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "25C"},
        {"role": "assistant", "content": "Paris 18C, Tokyo 25C.", "reasoning_content": "Summarize both."},
        {"role": "user", "content": "And Rome?"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [
        ({"content": "as a string"}, "as a string"),
        ({"content": None, "summary": [{"type": "summary_text", "text": "from summary"}]}, "from summary"),
        ({"summary": [{"type": "summary_text", "text": "absent content"}]}, "absent content"),
        ({"content": [], "summary": []}, None),
    ],
)
def test_reasoning_item_shapes(server, reasoning, expected):
    sent = send(server, input=[
        {"role": "user", "content": "q"},
        {"type": "reasoning", "id": "rs_1", **reasoning},
        {"type": "message", "role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
    ])  # fmt: skip
    assert sent["messages"][1].get("reasoning_content") == expected


def test_message_after_tool_results_starts_a_new_turn_and_text_joins_calls(server):
    sent = send(server, tools=[{"type": "function", "name": "f"}], input=[
        {"role": "user", "content": "go"},
        {"type": "message", "role": "assistant", "content": "I'll call f."},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ])  # fmt: skip
    assert sent["messages"][1] == {
        "role": "assistant", "content": "I'll call f.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }  # fmt: skip
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "done"}


def test_custom_tool_history_and_images_from_tools(server):
    sent = send(server, tools=[{"type": "custom", "name": "apply_patch"}], input=[
        {"role": "user", "content": "patch"},
        {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
        {"type": "custom_tool_call_output", "call_id": "p1", "output": "applied"},
        {"type": "function_call", "call_id": "s1", "name": "screenshot", "arguments": ""},
        {"type": "function_call_output", "call_id": "s1", "output": [
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
        ]},
    ])  # fmt: skip
    call = sent["messages"][1]["tool_calls"][0]
    assert call["function"] == {"name": "apply_patch", "arguments": json.dumps({"input": "*** Begin Patch\n*** End Patch"})}
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "p1", "content": "applied"}
    assert sent["messages"][4] == {"role": "tool", "tool_call_id": "s1", "content": "here"}
    assert sent["messages"][5] == {"role": "user", "content": [
        {"type": "text", "text": "Images returned by tool call s1:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"}},
    ]}  # fmt: skip


def test_odd_items_are_skipped_with_a_warning_never_a_400(server, caplog):
    caplog.set_level(logging.WARNING)
    sent = send(server, input=[
        "a bare string",
        {"role": "user", "content": "real question"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
        {"type": "mystery_item", "payload": 1},
        {"role": "narrator", "content": "odd role"},
        {"type": "message", "role": "user", "content": 42},
        {"type": "function_call", "call_id": "x"},
        {"type": "function_call_output", "call_id": "never-called", "output": "orphan"},
        {"type": "item_reference", "id": "msg_unknown"},
        {"type": "compaction", "encrypted_content": "zzz"},
        {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"},
        {"role": "user", "content": "next"},
    ])  # fmt: skip
    # A web search replayed from a thread (here, or begun on OpenAI) reaches the model as its call
    # and what is known of its results (docs/web-search.md); it is not an odd item.
    assert sent["messages"] == [
        {"role": "user", "content": "real question"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "ws_1", "type": "function", "function": {"name": "web_search", "arguments": '{"query": ""}'}}]},
        {"role": "tool", "tool_call_id": "ws_1", "content": "The results of this search were not kept."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c9", "content": "No output was recorded for this tool call."},
        {"role": "user", "content": "next"},
    ]  # fmt: skip
    skipped = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith(("skipping input item", "ignoring a compaction blob"))]  # fmt: skip
    assert len(skipped) == 8, skipped


def test_namespace_tools_are_flattened_and_mapped_back(server):
    tools = [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False},
        {"type": "namespace", "name": "agents", "description": "Sub-agents", "tools": [
            {"type": "function", "name": "spawn_agent", "description": "Spawn", "parameters": {"type": "object"}},
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        ]},
        {"type": "web_search", "external_web_access": True},
        {"type": "image_generation"},  # no component serves it: echoed, not offered
    ]  # fmt: skip
    server.upstream.push({"status": 200, "chunks": [
        {"data": {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "k1", "function": {"name": "spawn_agent", "arguments": "{}"}},
            {"index": 1, "id": "k2", "function": {"name": "agents__exec_command", "arguments": "{\"cmd\":\"ls\"}"}},
        ]}}]}},
        {"data": {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}},
        {"data": "[DONE]"},
    ]})  # fmt: skip
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": "hi", "tools": tools})
    response = check_response(answer.json())
    names = [t["function"]["name"] for t in server.upstream.requests[-1]["tools"]]
    assert names == ["exec_command", "spawn_agent", "agents__exec_command"]
    assert [(o.name, o.namespace) for o in response.output] == [("spawn_agent", "agents"), ("exec_command", "agents")]
    assert [t["type"] for t in answer.json()["tools"]] == ["function", "namespace", "web_search", "image_generation"]

    sent = send(server, tools=tools, input=[
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "k2", "name": "exec_command", "namespace": "agents", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "k2", "output": "ok"},
    ])  # fmt: skip
    assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == "agents__exec_command"


@pytest.mark.parametrize(
    ("choice", "expected", "offered"),
    [
        ("auto", "auto", ["a", "b"]),
        ("required", "required", ["a", "b"]),
        ({"type": "function", "name": "b"}, {"type": "function", "function": {"name": "b"}}, ["a", "b"]),
        ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "a"}]}, "required", ["a"]),
    ],
)
def test_tool_choice(server, choice, expected, offered):
    tools = [{"type": "function", "name": "a"}, {"type": "function", "name": "b"}]
    sent = send(server, input="x", tools=tools, tool_choice=choice, parallel_tool_calls=False)
    assert sent["tool_choice"] == expected
    assert [t["function"]["name"] for t in sent["tools"]] == offered
    assert sent["parallel_tool_calls"] is False


def test_tool_choice_none_offers_no_tools(server):
    sent = send(server, input="x", tools=[{"type": "function", "name": "a"}], tool_choice="none")
    assert "tools" not in sent and "tool_choice" not in sent


def test_sampling_and_format_parameters(server):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    sent = send(
        server, input="x", temperature=0.2, top_p=0.9, max_output_tokens=64, user="u1",
        safety_identifier="safe-1", prompt_cache_key="pc", metadata={"k": "v"}, store=False,
        reasoning={"effort": "high", "summary": "auto"},
        text={"format": {"type": "json_schema", "name": "N", "schema": schema, "strict": True}, "verbosity": "low"},
        client_metadata={"anything": "goes"},
    )  # fmt: skip
    assert sent["temperature"] == 0.2 and sent["top_p"] == 0.9 and sent["max_tokens"] == 64
    assert sent["user"] == "safe-1"
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "N", "schema": schema, "strict": True}}
    assert sent["reasoning_effort"] == "high"
    assert sent["chat_template_kwargs"] == {"reasoning_effort": "high", "enable_thinking": True}
    assert "prompt_cache_key" not in sent and "metadata" not in sent

    sent = send(server, input="x", text={"format": {"type": "json_object"}}, reasoning={"effort": "none"})
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["chat_template_kwargs"]["enable_thinking"] is False


def test_response_echoes_the_request(server):
    server.upstream.push(text_exchange("ok"))
    body = {
        "model": "test-model", "input": "x", "instructions": "sys", "temperature": 0.5, "metadata": {"k": "v"},
        "tools": [{"type": "function", "name": "a"}], "tool_choice": {"type": "function", "name": "a"},
        "text": {"format": {"type": "json_object"}}, "reasoning": {"effort": "low"}, "store": False,
        "max_output_tokens": 100, "prompt_cache_key": "pc", "safety_identifier": "s", "user": "u",
    }  # fmt: skip
    response = httpx.post(f"{server.base_url}/responses", json=body).json()
    check_response(response)
    assert response["instructions"] == "sys" and response["temperature"] == 0.5 and response["top_p"] == 1.0
    assert response["metadata"] == {"k": "v"} and response["store"] is False
    assert response["tools"] == [{"type": "function", "name": "a", "description": None, "parameters": None, "strict": None}]
    assert response["tool_choice"] == {"type": "function", "name": "a"}
    assert response["text"] == {"format": {"type": "json_object"}}
    assert response["reasoning"] == {"effort": "low", "summary": None}
    assert response["max_output_tokens"] == 100 and response["model"] == "test-model"
    assert response["id"].startswith("resp_") and response["output"][0]["id"].startswith("msg_")
