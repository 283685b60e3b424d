"""Tool calls for models whose chat template has no tool syntax (Gemma 3, base
models, many small models).

Such a template never reads `tools`: the model would not learn which tools exist, and it
has no call format to parse.  llama.cpp fills the gap with its generic format (common/chat.cpp
`common_chat_params_init_generic`, with minja's polyfills for the history); so does this:

* the system message describes the tools (their JSON schemas) and a JSON protocol;
* a grammar (`grammars.generic_json`) makes the whole output one JSON object:
  `{"tool_calls": [{"name": …, "arguments": {…}}]}` (`{"tool_call": {…}}` when calls are
  not parallel) or, with `tool_choice` auto, `{"response": …}`;
* the `generic_json` parser reads it back, the response streaming as content;
* the history is written in the same protocol, since the template cannot render calls:
  an assistant's calls become the JSON object it would have written, a tool result a user
  turn holding `{"tool_response": {"tool": …, "content": …}}`.
"""

from __future__ import annotations

import json
from typing import Any

from ..canonical.conversation import GenerationRequest, NamedToolChoice
from ..parsing.detect import template_format
from ..prompting.templates import ChatTemplate, chat_messages, chat_tools

FORMAT = "generic_json"


def applies(template: ChatTemplate, parser: str | None) -> bool:
    """Whether a model's calls go through the generic protocol: its parser is configured as
    `generic_json`, or (parser `auto`) its template never reads `tools` and writes no call
    syntax we know.  A template with a native format, or a configured one, keeps its own."""
    if parser and parser != "auto":
        return parser == FORMAT
    return not template.reads_tools and template_format(template.source) is None


def wanted(request: GenerationRequest) -> bool:
    """Whether the request offers tools to call."""
    return bool(request.tools) and request.tool_choice != "none"


def messages(request: GenerationRequest, template: ChatTemplate) -> list[dict[str, Any]]:
    """The conversation for a template without tool syntax, in Hugging Face's shape: earlier
    calls and results in the protocol's JSON, the protocol in the system message when the
    request offers tools, and the system text put in the first user turn when the template
    takes no system message (as minja's polyfill does)."""
    out: list[dict[str, Any]] = []
    after_result = False  # the last turn holds a tool result
    for message in chat_messages(request.messages):
        result = message["role"] == "tool"
        if result:
            response = {"tool": message["name"], "content": message["content"]} if message["name"] else {
                "content": message["content"]}  # fmt: skip
            message = {"role": "user", "content": _json({"tool_response": response})}
        elif message.get("tool_calls"):
            written: dict[str, Any] = {"tool_calls": [
                {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
                for call in message.pop("tool_calls")
            ]}  # fmt: skip
            if message["content"]:
                written["content"] = message["content"]
            message["content"] = _json(written)
        # Templates that want roles to alternate (Gemma's) get a run of results, and the
        # user turn after them, as one user turn.
        if message["role"] == "user" and out and out[-1]["role"] == "user" and (after_result or result):
            out[-1]["content"] += "\n\n" + message["content"]
            after_result = True
        else:
            out.append(message)
            after_result = result
    if wanted(request):
        if out and out[0]["role"] == "system":
            out[0]["content"] += "\n\n" + instructions(request)
        else:
            out.insert(0, {"role": "system", "content": instructions(request)})
    if out and out[0]["role"] == "system" and not template.takes_system:
        system = out.pop(0)["content"]
        first = next((turn for turn in out if turn["role"] == "user"), None)
        if first is None:
            out.insert(0, {"role": "user", "content": system})
        else:
            first["content"] = f"{system}\n\n{first['content']}" if first["content"] else system
    return out


def instructions(request: GenerationRequest) -> str:
    """The tools and the protocol, for the system message."""
    call = '{"name": "<tool name>", "arguments": {<its arguments>}}'
    parallel = request.parallel_tool_calls is not False
    calls = f'{{"tool_calls": [{call}, …]}}' if parallel else f'{{"tool_call": {call}}}'
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        what = f"Respond with one JSON object that calls the tool `{choice.name}`: {calls}"
    elif choice == "required":
        what = f"Respond with one JSON object that calls {'one or more' if parallel else 'one'} of these tools: {calls}"
    else:
        answer = "<your answer as JSON>" if request.response_format else '"<your answer>"'
        what = (f"Respond with one JSON object, either calling tools: {calls}\n"
                f'or answering the user: {{"response": {answer}}}')  # fmt: skip
    described = json.dumps(chat_tools(request), indent=2, ensure_ascii=False)
    return f"You can call these tools; the JSON schema of each one's arguments is its `parameters`:\n{described}\n\n{what}"


def _json(value: Any) -> str:
    """JSON as the grammar lets the model write it (one line, a space after `:` and `,`)."""
    return json.dumps(value, ensure_ascii=False)
