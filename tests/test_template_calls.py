"""Every real chat template, tried as a new user would.

For each template of `tests/data/formats/templates` that can render a tool call after its
own generation prompt, a raw `/v1/completions` engine answers with exactly that call (a
model that follows its template), ResponseKit renders the template itself and parses the
text with what it picked from the template alone, and the Responses API must return the
call as a `function_call` with the same name and arguments, never as text.  The answer is
sent in one piece and character by character.

One engine and one ResponseKit server serve every template (one upstream each), so the
whole table runs in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from responsekit.app import create_app
from responsekit.backends import generic_tools
from responsekit.canonical.conversation import (
    FunctionTool,
    GenerationRequest,
    Message,
    TextPart,
    ToolCall,
)
from responsekit.config import Settings, UpstreamConfig
from responsekit.prompting.templates import (
    ChatTemplate,
    TemplateError,
    chat_messages,
    chat_tools,
    load_template,
)

from .harness import DATA, check_response, check_stream, read_sse, serve

TEMPLATES = DATA / "formats" / "templates"
TOOL = FunctionTool(
    "get_weather",
    "The weather forecast for a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
ARGUMENTS = {"city": "Paris", "days": 3}
QUESTION = Message("user", [TextPart("What is the weather in Paris for the next 3 days?")])
CALL = Message("assistant", tool_calls=[ToolCall("a1B2c3D4e", TOOL.name, json.dumps(ARGUMENTS))])
"""The call the model answers with; its id is nine letters and digits, as Mistral's templates demand."""
CHARACTERS = "@characters"
"""Suffix of a model name whose engine answer comes one character per chunk."""

@dataclass(frozen=True)
class RenderedCall:
    """A template and the model answer it renders for one call."""

    name: str
    path: Path
    answer: str


def _render_call(path: Path) -> RenderedCall | None:
    """The text the template puts after its generation prompt for an assistant turn holding
    one call, or None when it renders none there (no tool syntax, the prompt rewritten for
    the last turn, or a refusal)."""
    template = load_template(path)
    if generic_tools.applies(template, None):
        return None  # no call syntax: ResponseKit writes calls as generic JSON, tested elsewhere
    tools = chat_tools(GenerationRequest(path.stem, [QUESTION], tools=[TOOL]))
    # What ResponseKit passes too (FireFunction's `functions`); a fixed `datetime`, since
    # both renders must agree to the character.
    variables = {"functions": json.dumps(tools, indent=2), "datetime": "Nov 25 2026 12:00:00 GMT"}
    try:
        prompt = _render(template, [QUESTION], tools, True, variables)
        whole = _render(template, [QUESTION, CALL], tools, False, variables)
    except TemplateError:
        return None
    if not whole.startswith(prompt) or TOOL.name not in whole[len(prompt) :]:
        return None
    return RenderedCall(path.stem, path, whole[len(prompt) :])


def _render(template: ChatTemplate, messages: list[Message], tools: list[dict[str, Any]],
            generation_prompt: bool, variables: dict[str, str]) -> str:  # fmt: skip
    turns = chat_messages(messages, text_arguments=template.text_arguments)
    return template.render(turns, tools, add_generation_prompt=generation_prompt, **variables)


RENDERED = [call for path in sorted(TEMPLATES.glob("*.jinja")) if (call := _render_call(path))]


class TemplateFollowingEngine:
    """A `/v1/completions` engine whose every model answers with its template's call, cut
    at the first stop text it is sent (as an engine stops there)."""

    def __init__(self, calls: list[RenderedCall]) -> None:
        self.answers = {call.name: call.answer for call in calls}
        self.app = Starlette(routes=[
            Route("/v1/models", self._models),
            Route("/v1/completions", self._complete, methods=["POST"]),
        ])  # fmt: skip

    async def _models(self, request: Request) -> JSONResponse:
        data = [{"id": name, "object": "model", "owned_by": "llamacpp"} for name in self.answers]
        return JSONResponse({"object": "list", "data": data})

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        model = str(body["model"])
        answer = self.answers[model.removesuffix(CHARACTERS)]
        cuts = [answer.find(stop) for stop in body.get("stop") or [] if stop and stop in answer]
        answer = answer[: min(cuts)] if cuts else answer
        pieces = list(answer) if model.endswith(CHARACTERS) else [answer]

        def frames() -> Iterator[str]:
            for piece in pieces:
                yield "data: " + json.dumps({"choices": [{"index": 0, "text": piece}]}) + "\n\n"
            usage = {
                "prompt_tokens": 100,
                "completion_tokens": len(pieces),
                "total_tokens": 100 + len(pieces),
            }
            last = {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}], "usage": usage}
            yield "data: " + json.dumps(last) + "\n\ndata: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One engine and one ResponseKit server with an upstream per template; yields its `/v1` URL."""
    engine = TemplateFollowingEngine(RENDERED)
    data = tmp_path_factory.mktemp("templates")
    with serve(engine.app) as engine_url:
        upstreams = [
            UpstreamConfig(
                name=call.name,
                base_url=f"{engine_url}/v1",
                api="completions",
                kind="llamacpp",
                models=[call.name, call.name + CHARACTERS],
                chat_template=call.path,
            )
            for call in RENDERED
        ]
        settings = Settings(
            probe=False,
            data_dir=data,
            database_url=f"sqlite:///{data / 's.db'}",
            upstreams=upstreams,
        )
        with serve(create_app(settings)) as url:
            yield f"{url}/v1"


def _body(model: str) -> dict[str, Any]:
    tool = {
        "type": "function",
        "name": TOOL.name,
        "description": TOOL.description,
        "parameters": TOOL.parameters,
    }
    return {"model": model, "input": QUESTION.text(), "tools": [tool], "store": False}


def _calls(output: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The answer's items other than reasoning: (name, arguments) of calls, (type, item) of others."""
    return [
        (item["name"], json.loads(item["arguments"]))
        if item["type"] == "function_call"
        else (item["type"], item)
        for item in output
        if item["type"] != "reasoning"
    ]


@pytest.mark.parametrize("call", [pytest.param(call, id=call.name) for call in RENDERED])
def test_the_call_a_template_renders_comes_back_as_that_call(
    gateway: str, call: RenderedCall
) -> None:
    whole = httpx.post(f"{gateway}/responses", json=_body(call.name), timeout=30)
    assert whole.status_code == 200, whole.text
    check_response(whole.json())
    assert _calls(whole.json()["output"]) == [(TOOL.name, ARGUMENTS)]

    body = {**_body(call.name + CHARACTERS), "stream": True}
    with httpx.stream("POST", f"{gateway}/responses", json=body, timeout=30) as answer:
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    assert _calls(check_stream(events)["output"]) == [(TOOL.name, ARGUMENTS)]


def test_the_table_covers_the_templates_that_render_calls() -> None:
    """A template that stops rendering its call would leave the table unseen."""
    assert len(RENDERED) == 46
