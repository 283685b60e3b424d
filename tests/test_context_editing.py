"""`context_management` on `/v1/messages`: old tool results and old thinking cleared from what the
engine reads, as Anthropic's context editing does, and the edits said in the answer.

The scripted engine keeps every request it gets; the answers validate against the `anthropic`
SDK's beta types (the feature is beta `context-management-2025-06-27`).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types.beta import BetaMessage, BetaMessageTokensCount, BetaRawMessageStreamEvent
from pydantic import TypeAdapter

from responsekit.orchestration.context_editing import CLEARED_INPUT, CLEARED_RESULT

from .harness import text_exchange
from .test_messages import HEADERS, TOOLS, anthropic_error, body, create, fold, stream

BETA = "context-management-2025-06-27"
BETA_EVENT = TypeAdapter(BetaRawMessageStreamEvent)
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
READ = {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties":
        {"path": {"type": "string"}}}}  # fmt: skip


def tool_history(calls: list[tuple[str, dict[str, Any]]], result_size: int = 2000) -> list[dict[str, Any]]:
    """A user's question, then one assistant turn a call with its result, each result
    `result_size` characters; the user asks again at the end."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for position, (name, arguments) in enumerate(calls, start=1):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"step {position}"},
            {"type": "tool_use", "id": f"toolu_{position}", "name": name, "input": arguments}]})  # fmt: skip
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{position}", "content": f"result {position} " + "x" * result_size}]})  # fmt: skip
    messages.append({"role": "user", "content": "and now?"})
    return messages


def sent_results(request: dict[str, Any]) -> dict[str, str]:
    return {message["tool_call_id"]: message["content"] for message in request["messages"] if message["role"] == "tool"}


def sent_arguments(request: dict[str, Any]) -> dict[str, str]:
    return {call["id"]: call["function"]["arguments"] for message in request["messages"]
            for call in message.get("tool_calls") or ()}  # fmt: skip


def beta_create(url: str, request: dict[str, Any]) -> httpx.Response:
    return create(url, request, headers={"anthropic-beta": BETA})


def test_old_tool_results_are_cleared_and_the_edit_said(server):
    calls = [("get_weather", {"city": "Oslo"}), ("read_file", {"path": "a.txt"}), ("get_weather", {"city": "Rome"}),
             ("get_weather", {"city": "Lima"}), ("read_file", {"path": "b.txt"})]  # fmt: skip
    edit = {"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 1000},
            "keep": {"type": "tool_uses", "value": 2}, "exclude_tools": ["read_file"],
            "clear_tool_inputs": ["get_weather"]}  # fmt: skip
    server.upstream.push(text_exchange("done"))
    answer = beta_create(server.url, body(tools=[*TOOLS, READ], messages=tool_history(calls),
                                          context_management={"edits": [edit]}))  # fmt: skip
    assert answer.status_code == 200, answer.text
    sent = server.upstream.requests[-1]
    results = sent_results(sent)
    assert results["toolu_1"] == results["toolu_3"] == CLEARED_RESULT
    assert results["toolu_2"].startswith("result 2 "), "an excluded tool's result is kept"
    assert results["toolu_4"].startswith("result 4 ") and results["toolu_5"].startswith("result 5 "), "the last 2 kept"
    arguments = sent_arguments(sent)
    assert arguments["toolu_1"] == arguments["toolu_3"] == CLEARED_INPUT
    assert json.loads(arguments["toolu_4"]) == {"city": "Lima"}, "a kept call keeps its input"
    assert [m["role"] for m in sent["messages"]].count("tool") == 5, "every call keeps its result"
    message = answer.json()
    BetaMessage.model_validate(message, strict=True)
    [applied] = message["context_management"]["applied_edits"]
    assert applied["type"] == CLEAR_TOOL_USES and applied["cleared_tool_uses"] == 2
    assert 900 <= applied["cleared_input_tokens"] <= 1100, "two results of 2,000 characters, about four a token"
    assert message["usage"]["input_tokens"] < 1500, "the prompt counted after the edit"


def test_clear_tool_inputs_true_clears_every_cleared_calls_input(server):
    edit = {"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100},
            "keep": {"type": "tool_uses", "value": 1}, "clear_tool_inputs": True}  # fmt: skip
    calls = [("get_weather", {"city": "Oslo"}), ("read_file", {"path": "a.txt"}), ("get_weather", {"city": "Lima"})]
    server.upstream.push(text_exchange("done"))
    assert beta_create(server.url, body(tools=[*TOOLS, READ], messages=tool_history(calls),
                                        context_management={"edits": [edit]})).status_code == 200  # fmt: skip
    arguments = sent_arguments(server.upstream.requests[-1])
    assert arguments["toolu_1"] == arguments["toolu_2"] == CLEARED_INPUT
    assert json.loads(arguments["toolu_3"]) == {"city": "Lima"}


def test_below_the_trigger_nothing_is_cleared(server):
    calls = [("get_weather", {"city": city}) for city in ("Oslo", "Rome", "Lima", "Kyiv", "Pune")]
    history = tool_history(calls)
    for edits in ([{"type": CLEAR_TOOL_USES}],  # Anthropic's default trigger: 100,000 input tokens
                  [{"type": CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": 5}}],
                  [{"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 100},
                    "clear_at_least": {"type": "input_tokens", "value": 5000}}]):  # 2 results can free ~1,000  # fmt: skip
        server.upstream.push(text_exchange("done"))
        answer = beta_create(server.url, body(tools=TOOLS, messages=history, context_management={"edits": edits}))
        assert answer.status_code == 200, answer.text
        assert CLEARED_RESULT not in json.dumps(server.upstream.requests[-1]), edits
        BetaMessage.model_validate(answer.json(), strict=True)
        assert answer.json()["context_management"] == {"applied_edits": []}
    server.upstream.push(text_exchange("done"))
    plain = create(server.url, body(tools=TOOLS, messages=history)).json()
    assert "context_management" not in plain, "only asked for, it is said"


def test_a_tool_uses_trigger(server):
    calls = [("get_weather", {"city": city}) for city in ("Oslo", "Rome", "Lima", "Kyiv")]
    edit = {"type": CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": 3}, "keep": {"type": "tool_uses", "value": 1}}
    server.upstream.push(text_exchange("done"))
    answer = beta_create(server.url, body(tools=TOOLS, messages=tool_history(calls, result_size=40),
                                          context_management={"edits": [edit]}))  # fmt: skip
    results = sent_results(server.upstream.requests[-1])
    assert [key for key, text in results.items() if text == CLEARED_RESULT] == ["toolu_1", "toolu_2", "toolu_3"]
    assert answer.json()["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 3


def test_claude_codes_edits(server):
    """The edits as Claude Code sends them (read from its bundle): the thinking edit keeping all,
    then tool clearing by a count of tool uses, with `clear_at_least` and the tools it excludes."""
    calls = [("Read", {"file_path": f"/src/{name}.py"}) for name in "abcdef"] + [("TodoWrite", {"todos": []})]
    edits = [{"type": CLEAR_THINKING, "keep": "all"},
             {"type": CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": 5}, "keep": {"type": "tool_uses", "value": 2},
              "clear_at_least": {"type": "input_tokens", "value": 1000}, "exclude_tools": ["TodoWrite"],
              "clear_tool_inputs": ["Read"]}]  # fmt: skip
    tools = [{"name": name, "input_schema": {"type": "object"}} for name in ("Read", "TodoWrite")]
    server.upstream.push(text_exchange("done"))
    events = stream(server.url, body(tools=tools, messages=tool_history(calls), context_management={"edits": edits}),
                    adapter=BETA_EVENT, params={"beta": "true"})  # fmt: skip
    sent = server.upstream.requests[-1]
    cleared = [key for key, text in sent_results(sent).items() if text == CLEARED_RESULT]
    assert cleared == ["toolu_1", "toolu_2", "toolu_3", "toolu_4", "toolu_5"], "all but the last two"
    assert all(sent_arguments(sent)[key] == CLEARED_INPUT for key in cleared)
    [delta] = [event for event in events if event["type"] == "message_delta"]
    [applied] = delta["context_management"]["applied_edits"]
    assert applied["cleared_tool_uses"] == 5 and applied["cleared_input_tokens"] >= 1000


def thinking_block(server) -> dict[str, Any]:
    """A thinking block this server sealed, as a client replays it."""
    server.upstream.push(text_exchange("Hello.", reasoning="I thought it over."))
    message = create(server.url, body(thinking={"type": "enabled", "budget_tokens": 2000})).json()
    block = message["content"][0]
    assert block["type"] == "thinking" and block["signature"]
    return block


def thinking_history(block: dict[str, Any], turns: int) -> list[dict[str, Any]]:
    """`turns` exchanges, each assistant turn a thinking block, a call, its result and an answer."""
    messages: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        messages += [
            {"role": "user", "content": f"question {turn}"},
            {"role": "assistant", "content": [block, {"type": "tool_use", "id": f"toolu_{turn}", "name": "get_weather",
                                                      "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": "-3C"}]},
            {"role": "assistant", "content": [block, {"type": "text", "text": f"answer {turn}"}]},
        ]  # fmt: skip
    return [*messages, {"role": "user", "content": "last question"}]


def sent_thinking(request: dict[str, Any]) -> list[bool]:
    """Whether each assistant message the engine got holds reasoning."""
    return [bool(m.get("reasoning_content")) for m in request["messages"] if m["role"] == "assistant"]


@pytest.mark.parametrize(("keep", "kept_turns"), [(None, 1), ({"type": "thinking_turns", "value": 2}, 2),
                                                  ("all", 3), ({"type": "all"}, 3),
                                                  ({"type": "thinking_turns", "value": 0}, 0)])  # fmt: skip
def test_thinking_of_older_turns_is_dropped(server, keep, kept_turns):
    block = thinking_block(server)
    edit = {"type": CLEAR_THINKING, **({} if keep is None else {"keep": keep})}
    server.upstream.push(text_exchange("done"))
    answer = beta_create(server.url, body(tools=TOOLS, messages=thinking_history(block, 3), thinking={"type": "adaptive"},
                                          context_management={"edits": [edit]}))  # fmt: skip
    assert answer.status_code == 200, answer.text
    # Two assistant messages a turn (the call, then the answer after its result): a turn's tool loop keeps its thinking.
    assert sent_thinking(server.upstream.requests[-1]) == [False] * 2 * (3 - kept_turns) + [True] * 2 * kept_turns
    message = answer.json()
    BetaMessage.model_validate(message, strict=True)
    cleared = [{"type": CLEAR_THINKING, "cleared_thinking_turns": 3 - kept_turns,
                "cleared_input_tokens": (3 - kept_turns) * 2 * len("I thought it over.") // 4}]  # fmt: skip
    assert message["context_management"] == {"applied_edits": cleared if kept_turns < 3 else []}


def test_both_edits_streamed(server):
    block = thinking_block(server)
    history = thinking_history(block, 4)
    for message in history:  # large results, to pass the trigger
        for part in message["content"] if isinstance(message["content"], list) else ():
            if part["type"] == "tool_result":
                part["content"] = "y" * 4000
    edits = [{"type": CLEAR_THINKING, "keep": {"type": "thinking_turns", "value": 1}},
             {"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": 2000}}]  # fmt: skip
    server.upstream.push(text_exchange("done", reasoning="Fine."))
    events = stream(server.url, body(tools=TOOLS, messages=history, thinking={"type": "adaptive"},
                                     context_management={"edits": edits}), adapter=BETA_EVENT)  # fmt: skip
    sent = server.upstream.requests[-1]
    assert sent_thinking(sent) == [False] * 6 + [True] * 2
    assert list(sent_results(sent).values()) == [CLEARED_RESULT, "y" * 4000, "y" * 4000, "y" * 4000], "3 kept"
    [delta] = [event for event in events if event["type"] == "message_delta"]
    applied = delta["context_management"]["applied_edits"]
    assert [(edit["type"], edit.get("cleared_thinking_turns", edit.get("cleared_tool_uses"))) for edit in applied] == \
        [(CLEAR_THINKING, 3), (CLEAR_TOOL_USES, 1)]  # fmt: skip
    assert applied[1]["cleared_input_tokens"] == (4000 - len(CLEARED_RESULT)) // 4
    # The SDK's own stream accumulation takes the edits from the message_delta.
    server.upstream.push(text_exchange("done", reasoning="Fine."))
    sdk = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
    with sdk.beta.messages.stream(model="test-model", max_tokens=100, tools=TOOLS, messages=history,
                                  thinking={"type": "adaptive"}, context_management={"edits": edits},
                                  betas=[BETA]) as streamed:  # type: ignore[arg-type]  # fmt: skip
        final = streamed.get_final_message()
    assert final.context_management is not None
    assert [edit.type for edit in final.context_management.applied_edits] == [CLEAR_THINKING, CLEAR_TOOL_USES]
    assert fold(events)["stop_reason"] == "end_turn"


def test_count_tokens_counts_the_edited_history(server):
    calls = [("get_weather", {"city": city}) for city in ("Oslo", "Rome", "Lima", "Kyiv")]
    request = {"model": "test-model", "messages": tool_history(calls, result_size=0), "tools": TOOLS}
    for message in request["messages"]:  # 300 words a result: the scripted engine counts a token a word
        for part in message["content"] if isinstance(message["content"], list) else ():
            if part["type"] == "tool_result":
                part["content"] = " ".join(["word"] * 300)
    url = f"{server.url}/v1/messages/count_tokens"
    plain = httpx.post(url, json=request, headers=HEADERS).json()
    edit = {"type": CLEAR_TOOL_USES, "trigger": {"type": "tool_uses", "value": 1}, "keep": {"type": "tool_uses", "value": 1}}
    edited = httpx.post(url, json={**request, "context_management": {"edits": [edit]}},
                        headers={**HEADERS, "anthropic-beta": BETA}).json()  # fmt: skip
    BetaMessageTokensCount.model_validate(edited, strict=True)
    assert edited["context_management"] == {"original_input_tokens": plain["input_tokens"]}
    assert edited["input_tokens"] <= plain["input_tokens"] - 3 * 290, "three results of 300 words cleared"


@pytest.mark.parametrize("context_management", [
    {"edits": "clear"},
    {"edits": [{"type": "clear_everything"}]},
    {"edits": ["clear_tool_uses_20250919"]},
    {"edits": [{"type": CLEAR_TOOL_USES}, {"type": CLEAR_TOOL_USES}]},
    {"edits": [{"type": CLEAR_TOOL_USES}, {"type": CLEAR_THINKING}]},  # the thinking edit comes first
    {"edits": [{"type": CLEAR_TOOL_USES, "trigger": {"type": "messages", "value": 3}}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": -1}}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": True}}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "keep": 3}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "keep": {"type": "input_tokens", "value": 3}}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "clear_at_least": {"type": "tool_uses", "value": 3}}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "exclude_tools": "Read"}]},
    {"edits": [{"type": CLEAR_TOOL_USES, "clear_tool_inputs": "yes"}]},
    {"edits": [{"type": CLEAR_THINKING, "keep": {"type": "thinking_turns"}}]},
    {"edits": [{"type": CLEAR_THINKING, "keep": "some"}]},
    "clear",
])  # fmt: skip
def test_invalid_edits_are_400s(server, context_management):
    answer = beta_create(server.url, body(context_management=context_management))
    anthropic_error(answer, 400, "invalid_request_error")
    counted = httpx.post(f"{server.url}/v1/messages/count_tokens", headers=HEADERS,
                         json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                               "context_management": context_management})  # fmt: skip
    anthropic_error(counted, 400, "invalid_request_error")
    assert not server.upstream.requests, "nothing reached the engine"


def test_on_an_in_process_model_the_trigger_and_message_start_count_exactly(engine_server):
    """Where the prompt is counted exactly, the trigger compares the exact count, and
    `message_start` and `count_tokens` count the history the edits leave."""
    model = engine_server.app.state.router.engines[0].model
    calls = [("get_weather", {"city": city}) for city in ("Oslo", "Rome", "Lima")]
    request = {"model": model, "messages": tool_history(calls, result_size=600), "tools": TOOLS}
    url = f"{engine_server.url}/v1/messages/count_tokens"
    original = httpx.post(url, json=request, headers=HEADERS, timeout=60).json()["input_tokens"]
    edit = {"type": CLEAR_TOOL_USES, "trigger": {"type": "input_tokens", "value": original - 1},
            "keep": {"type": "tool_uses", "value": 1}}  # fmt: skip
    edited = {**request, "context_management": {"edits": [edit]}}
    counted = httpx.post(url, json=edited, headers=HEADERS, timeout=60).json()
    assert "estimated" not in counted and counted["context_management"] == {"original_input_tokens": original}
    assert counted["input_tokens"] < original - 100
    events = stream(engine_server.url, {**edited, "max_tokens": 5}, adapter=BETA_EVENT)
    assert events[0]["message"]["usage"]["input_tokens"] == counted["input_tokens"], "message_start counts the edited prompt"
    [delta] = [event for event in events if event["type"] == "message_delta"]
    assert delta["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 2
    untouched = {**request, "context_management": {"edits": [{**edit, "trigger": {"type": "input_tokens", "value": original}}]}}
    assert httpx.post(url, json=untouched, headers=HEADERS, timeout=60).json()["input_tokens"] == original, \
        "at the trigger, not past it: nothing cleared"  # fmt: skip
