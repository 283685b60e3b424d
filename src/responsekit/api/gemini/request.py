"""A Gemini API `GenerateContentRequest` (`/v1beta/models/{model}:generateContent`) -> the
canonical conversation.

Top-level parameters are validated (a bad one is a 400 `INVALID_ARGUMENT`); `contents` is a
replayed history, so an odd content or part in it is skipped with a warning rather than refused.
Field names come in lowerCamelCase as the SDKs send them, or in snake_case, which Google's JSON
parser accepts too.

Thoughts come back as the `thoughtSignature` this server sealed their text into (`sealing.py`,
as the Messages API's thinking signatures): opened, the reasoning reaches the model again.
Google's placeholder signatures (`skip_thought_signature_validator`, which Gemini CLI puts on
calls it has no signature for) carry no reasoning and are accepted quietly; any other signature
that does not open is skipped with a warning. A thought part's own text is never read back: it
is what the client was shown, which need not be what the model thought.

Function calls keep their `id`; a call without one gets an id made from its place in the
history, and a `functionResponse` is paired with its call by `id`, else by `name`, else by
order, so calls and results stay paired whatever ids the client kept.
"""

from __future__ import annotations

import json
import logging
import mimetypes
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel, to_snake

from ...canonical.conversation import (
    FilePart,
    FunctionTool,
    GenerationRequest,
    ImagePart,
    Message,
    NamedToolChoice,
    Part,
    TextPart,
    ToolCall,
    ToolChoice,
)
from ...canonical.errors import APIError
from ...canonical.server_tools import ServerToolSpecs, check_fetch_spec, check_spec
from ...orchestration.sealing import Sealer

log = logging.getLogger(__name__)

PLACEHOLDER_SIGNATURES = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})
"""Signatures Google documents for history it did not sign (Gemini CLI sends the first)."""
MAX_SERVER_CALLS = 8
"""Searches and page reads one answer may make before the model must answer (the API has no
`max_tool_calls`; the same bound as Chat Completions' `web_search_options`)."""
EFFORTS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high", "XHIGH": "xhigh"}
"""`thinkingConfig.thinkingLevel` -> the canonical reasoning effort."""
SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
_INTEGER_KEYS = frozenset({"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"})
"""Schema keys Google's API types as int64, which its JSON writes as strings."""


class _Params(BaseModel):
    """Google's field names (lowerCamelCase) as aliases; snake_case names are accepted too."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class ThinkingConfig(_Params):
    include_thoughts: bool | None = None
    """Whether the answer shows thought parts (their signature comes either way)."""
    thinking_budget: int | None = Field(default=None, ge=-1)
    """0 turns thinking off, -1 leaves it to the model, n maps to an effort (as the Messages
    API's `budget_tokens`: up to 4k low, 16k medium, more high)."""
    thinking_level: str | None = None


class GenerationConfig(_Params):
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    """Accepted; the canonical request has no top-k (engines keep their own)."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    candidate_count: int | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_mime_type: str | None = None
    response_schema: dict[str, Any] | None = None
    """Google's OpenAPI-subset schema (`type: OBJECT`…), made JSON Schema here."""
    response_json_schema: dict[str, Any] | None = None
    thinking_config: ThinkingConfig | None = None


class GenerateContentRequest(_Params):
    contents: list[Any] = Field(min_length=1)
    system_instruction: dict[str, Any] | str | None = None
    tools: list[Any] | None = None
    tool_config: dict[str, Any] | None = None
    generation_config: GenerationConfig | None = None
    safety_settings: list[Any] | None = None
    """Accepted and ignored: no safety filter runs here."""
    cached_content: str | None = None
    """Refused when given: this server keeps no cached contents."""


class CountTokensRequest(_Params):
    """`:countTokens`: `contents`, or a whole `generateContentRequest` (with tools and system instruction)."""

    contents: list[Any] | None = None
    generate_content_request: GenerateContentRequest | None = None


@dataclass(slots=True)
class Translation:
    generation: GenerationRequest
    server_tools: ServerToolSpecs
    """`googleSearch` (and the legacy `googleSearchRetrieval`) as a web search, `urlContext` as a
    page reader of the prompt's URLs, when the server has a search engine."""
    show_thoughts: bool
    """`thinkingConfig.includeThoughts`: thought parts are shown (signatures come either way)."""


def invalid(message: str, param: str | None = None) -> APIError:
    """A 400 `INVALID_ARGUMENT` (rendered in Google's envelope on these paths)."""
    return APIError(400, message, param=param, code="invalid_value")


def translate(body: GenerateContentRequest, model: str, sealer: Sealer, *, web_search: bool = False) -> Translation:
    """`web_search`: whether the server has a search engine to run `googleSearch` and `urlContext` with."""
    if body.cached_content:
        raise invalid("`cachedContent` is not supported: this server keeps no cached contents.", "cachedContent")
    tools, specs = _tools(body.tools or [], web_search)
    choice, tools = _tool_choice(body.tool_config, tools, bool(specs))
    system = _system(body.system_instruction)
    messages = _History(sealer).read(body.contents, system)
    if not any(message.role != "system" for message in messages):
        raise invalid("`contents` holds no usable content.", "contents")
    if system:
        messages.insert(0, Message("system", [TextPart("\n".join(system))]))
    config = body.generation_config or GenerationConfig()
    if config.candidate_count is not None and config.candidate_count != 1:
        raise invalid("Only one candidate can be generated: `candidateCount` must be 1.",
                      "generationConfig.candidateCount")  # fmt: skip
    effort, show = _thinking(config.thinking_config)
    generation = GenerationRequest(
        model=model, messages=messages, tools=tools, tool_choice=choice, response_format=_response_format(config),
        max_output_tokens=config.max_output_tokens, temperature=config.temperature, top_p=config.top_p,
        reasoning_effort=effort, stop=[stop for stop in config.stop_sequences or () if stop] or None, seed=config.seed,
        presence_penalty=config.presence_penalty, frequency_penalty=config.frequency_penalty,
    )  # fmt: skip
    thinking = config.thinking_config
    if thinking is not None and thinking.thinking_budget is not None and thinking.thinking_budget > 0:
        generation.reasoning_budget = thinking.thinking_budget
    if specs:
        specs.max_tool_calls = MAX_SERVER_CALLS
    return Translation(generation, specs, show)


@lru_cache(maxsize=256)
def _snake(name: str) -> str:
    return to_snake(name)


def field(node: dict[str, Any], name: str) -> Any:
    """A field of a JSON object by its lowerCamelCase name, or its snake_case one."""
    value = node.get(name)
    return node.get(_snake(name)) if value is None else value


# --- tools -------------------------------------------------------------------------------


def _tools(tools: list[Any], web_search: bool) -> tuple[list[FunctionTool], ServerToolSpecs]:
    """Function declarations as canonical functions; `googleSearch` and `urlContext` as the web
    tools the server runs (docs/web-search.md); other built-in tools (code execution, Maps,
    file search…) have nobody to run them here: left out with a warning."""
    functions: list[FunctionTool] = []
    specs = ServerToolSpecs()
    for position, tool in enumerate(tools):
        param = f"tools[{position}]"
        if not isinstance(tool, dict):
            raise invalid("Each tool must be an object.", param)
        for key, value in tool.items():
            key = to_camel(key) if "_" in key else key
            if key == "functionDeclarations":
                if not isinstance(value, list):
                    raise invalid("`functionDeclarations` must be a list.", f"{param}.functionDeclarations")
                functions += [_declaration(declaration, f"{param}.functionDeclarations[{n}]")
                              for n, declaration in enumerate(value)]  # fmt: skip
            elif key in ("googleSearch", "googleSearchRetrieval") and web_search:
                if specs.web_search is None:
                    specs.web_search = _search_spec(value, f"{param}.{key}")
            elif key == "urlContext" and web_search:
                if specs.web_fetch is None:
                    specs.web_fetch = check_fetch_spec({}, f"{param}.urlContext")
            elif key in ("googleSearch", "googleSearchRetrieval", "urlContext"):
                log.warning("leaving out the %s tool: this server has no search engine configured", key)
            else:
                log.warning("leaving out the %s tool: this server does not run it", key)
    names = [function.name for function in functions]
    for name in names:
        if names.count(name) > 1:
            raise invalid(f"Duplicate function declaration `{name}`.", "tools")
    return functions, specs


def _declaration(declaration: Any, param: str) -> FunctionTool:
    if not isinstance(declaration, dict):
        raise invalid("Each function declaration must be an object.", param)
    name, description = declaration.get("name"), declaration.get("description")
    if not isinstance(name, str) or not name:
        raise invalid("Each function declaration needs a `name`.", f"{param}.name")
    if description is not None and not isinstance(description, str):
        raise invalid("`description` must be a string.", f"{param}.description")
    schema = field(declaration, "parametersJsonSchema")
    if schema is not None:
        if not isinstance(schema, dict):
            raise invalid("`parametersJsonSchema` must be a JSON Schema object.", f"{param}.parametersJsonSchema")
        parameters = lower_types(schema)
    elif (given := declaration.get("parameters")) is not None:
        parameters = json_schema(given, f"{param}.parameters")
    else:
        parameters = {"type": "object", "properties": {}}
    return FunctionTool(name, description or None, parameters)


def _search_spec(value: Any, param: str) -> dict[str, Any]:
    """`googleSearch` as the web search spec the pipeline serves: `excludeDomains` as blocked domains."""
    options = value if isinstance(value, dict) else {}
    blocked = field(options, "excludeDomains")
    if blocked is not None and not (isinstance(blocked, list) and all(isinstance(d, str) for d in blocked)):
        raise invalid("`excludeDomains` must be a list of domain names.", f"{param}.excludeDomains")
    spec: dict[str, Any] = {"type": "web_search", "name": "web_search",
                            "filters": {"blocked_domains": blocked} if blocked else None}  # fmt: skip
    check_spec(spec, param)
    return spec


def _tool_choice(config: dict[str, Any] | None, tools: list[FunctionTool],
                 server_tools: bool) -> tuple[ToolChoice, list[FunctionTool]]:  # fmt: skip
    """`toolConfig.functionCallingConfig`: `AUTO` (and `VALIDATED`, calls or text), `ANY` (a call
    is required; one allowed name forces that function), `NONE`; `allowedFunctionNames` limits
    the functions offered."""
    calling = field(config or {}, "functionCallingConfig")
    if calling is None:
        return "auto", tools
    if not isinstance(calling, dict):
        raise invalid("`functionCallingConfig` must be an object.", "toolConfig.functionCallingConfig")
    mode = calling.get("mode")
    mode = str(mode).upper() if isinstance(mode, str) else "MODE_UNSPECIFIED" if mode is None else None
    allowed = field(calling, "allowedFunctionNames")
    if allowed is not None:
        if not (isinstance(allowed, list) and all(isinstance(name, str) for name in allowed)):
            raise invalid("`allowedFunctionNames` must be a list of function names.",
                          "toolConfig.functionCallingConfig.allowedFunctionNames")  # fmt: skip
        unknown = sorted(set(allowed) - {tool.name for tool in tools})
        if unknown:
            raise invalid(f"`allowedFunctionNames` names functions that are not declared: {', '.join(unknown)}.",
                          "toolConfig.functionCallingConfig.allowedFunctionNames")  # fmt: skip
        if allowed:
            tools = [tool for tool in tools if tool.name in allowed]
    if mode in ("AUTO", "MODE_UNSPECIFIED", "VALIDATED"):
        return "auto", tools
    if mode == "NONE":
        return "none", tools
    if mode == "ANY":
        if not tools:
            raise invalid("Function calling mode ANY needs function declarations.", "toolConfig.functionCallingConfig.mode")
        if allowed is not None and len(allowed) == 1 and not server_tools:
            return NamedToolChoice(allowed[0]), tools
        return "required", tools
    raise invalid(f"Invalid function calling mode: {calling.get('mode')!r}.", "toolConfig.functionCallingConfig.mode")


def json_schema(schema: Any, param: str) -> dict[str, Any]:
    """Google's OpenAPI-subset `Schema` as JSON Schema: `type` in lower case (`OBJECT` -> `object`),
    `nullable` as a `null` type, int64 bounds written as strings made integers, `example` as
    `examples`, `defs`/`ref` as `$defs`/`$ref`, `propertyOrdering` as the order of `properties`;
    the rest (`format`, `enum`, `required`, `description`, `pattern`, `minimum`…) as given."""
    if not isinstance(schema, dict):
        raise invalid("A schema must be an object.", param)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        key = to_camel(key) if "_" in key else key
        where = f"{param}.{key}"
        if key == "type":
            kind = _schema_type(value, where)
            if kind is not None:
                out["type"] = kind
        elif key in ("nullable", "propertyOrdering"):
            continue
        elif key == "properties":
            if not isinstance(value, dict):
                raise invalid("`properties` must be an object.", where)
            out["properties"] = {name: json_schema(child, f"{where}.{name}") for name, child in value.items()}
        elif key == "items":
            out["items"] = json_schema(value, where)
        elif key in ("anyOf", "oneOf", "allOf"):
            if not isinstance(value, list):
                raise invalid(f"`{key}` must be a list of schemas.", where)
            out[key] = [json_schema(child, f"{where}[{n}]") for n, child in enumerate(value)]
        elif key == "defs":
            if not isinstance(value, dict):
                raise invalid("`defs` must be an object.", where)
            out["$defs"] = {name: json_schema(child, f"{where}.{name}") for name, child in value.items()}
        elif key == "ref":
            out["$ref"] = value
        elif key == "additionalProperties":
            out[key] = json_schema(value, where) if isinstance(value, dict) else value
        elif key == "example":
            out["examples"] = [value]
        elif key in _INTEGER_KEYS and isinstance(value, str):
            try:
                out[key] = int(value)
            except ValueError:
                raise invalid(f"`{key}` must be an integer.", where) from None
        else:
            out[key] = value
    ordering = field(schema, "propertyOrdering")
    if isinstance(ordering, list) and isinstance(out.get("properties"), dict):
        properties = out["properties"]
        first = [name for name in ordering if isinstance(name, str) and name in properties]
        out["properties"] = {name: properties[name] for name in [*first, *(n for n in properties if n not in first)]}
    if schema.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str) and kind != "null":
            out["type"] = [kind, "null"]
        elif isinstance(out.get("anyOf"), list):
            out["anyOf"].append({"type": "null"})
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def lower_types(schema: Any) -> Any:
    """A JSON Schema with Google's upper-case `type` names (`OBJECT`) in lower case, as Google's API
    reads them (Gemini CLI's routing request sends `responseJsonSchema` so); the rest as given."""
    if isinstance(schema, list):
        return [lower_types(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str) and value.lower() in SCHEMA_TYPES:
            out[key] = value.lower()
        elif key == "type" and isinstance(value, list):
            out[key] = [kind.lower() if isinstance(kind, str) and kind.lower() in SCHEMA_TYPES else kind for kind in value]
        elif key in ("enum", "const", "default", "examples", "example"):
            out[key] = value  # values, not schemas
        else:
            out[key] = lower_types(value)
    return out


def _schema_type(value: Any, param: str) -> str | list[str] | None:
    if isinstance(value, list):
        kinds = [_schema_type(kind, param) for kind in value]
        return [kind for kind in kinds if isinstance(kind, str)] or None
    if not isinstance(value, str):
        raise invalid("A schema's `type` must be a string.", param)
    if value.upper() == "TYPE_UNSPECIFIED":
        return None
    if value.lower() not in SCHEMA_TYPES:
        raise invalid(f"Invalid schema type: {value!r}.", param)
    return value.lower()


# --- generation options ------------------------------------------------------------------


def _thinking(config: ThinkingConfig | None) -> tuple[str | None, bool]:
    """The reasoning effort and whether thoughts are shown. `thinkingBudget` 0 is effort `none`,
    -1 the engine's default, n an effort by size; `thinkingLevel` names the effort itself."""
    if config is None:
        return None, False
    show = config.include_thoughts is True
    budget, level = config.thinking_budget, config.thinking_level
    if budget is not None and level is not None:
        raise invalid("Give `thinkingBudget` or `thinkingLevel`, not both.", "generationConfig.thinkingConfig")
    if level is not None:
        if level.upper() == "THINKING_LEVEL_UNSPECIFIED":
            return None, show
        effort = EFFORTS.get(level.upper())
        if effort is None:
            raise invalid(f"Invalid thinkingLevel: {level!r}.", "generationConfig.thinkingConfig.thinkingLevel")
        return effort, show
    if budget is None or budget == -1:
        return None, show
    if budget == 0:
        return "none", show
    return ("low" if budget <= 4096 else "medium" if budget <= 16384 else "high"), show


def _response_format(config: GenerationConfig) -> dict[str, Any] | None:
    """`responseMimeType: application/json` with `responseJsonSchema` or `responseSchema` as a
    JSON schema answer, without either as any JSON object; `text/plain` as text."""
    mime = (config.response_mime_type or "text/plain").lower()
    schema = lower_types(config.response_json_schema) if config.response_json_schema is not None else None
    if schema is None and config.response_schema is not None:
        schema = json_schema(config.response_schema, "generationConfig.responseSchema")
    if mime == "application/json":
        if schema is None:
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": True}}
    if schema is not None:
        raise invalid("`responseSchema` needs `responseMimeType: application/json`.", "generationConfig.responseMimeType")
    if mime == "text/x.enum":
        log.warning("answering text/x.enum as plain text")
        return None
    if mime != "text/plain":
        raise invalid(f"Unsupported responseMimeType {config.response_mime_type!r}: "
                      "use text/plain or application/json.", "generationConfig.responseMimeType")  # fmt: skip
    return None


# --- the history -------------------------------------------------------------------------


def _system(instruction: dict[str, Any] | str | None) -> list[str]:
    if instruction is None:
        return []
    if isinstance(instruction, str):
        return [instruction]
    parts = instruction.get("parts")
    if not isinstance(parts, list):
        raise invalid("`systemInstruction` must be a content with `parts`.", "systemInstruction")
    texts = []
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            log.warning("skipping a systemInstruction part that is not text")
    return texts


@dataclass(slots=True)
class _Pending:
    id: str
    name: str
    given: bool
    """Whether the client's history gave the id (else it was made here)."""


class _History:
    """`contents` as canonical messages, pairing each function response with its call."""

    def __init__(self, sealer: Sealer) -> None:
        self.sealer = sealer
        self.pending: deque[_Pending] = deque()
        """Calls of the last model turn still waiting for their response."""

    def read(self, contents: list[Any], system: list[str]) -> list[Message]:
        messages: list[Message] = []
        for position, content in enumerate(contents):
            parts = content.get("parts") if isinstance(content, dict) else None
            role = (content.get("role") or "user") if isinstance(content, dict) else None
            if not isinstance(parts, list) or not isinstance(role, str):
                log.warning("skipping content %d: %s", position, str(content)[:120])
                continue
            if role == "model":
                messages += self._model(parts, position)
            elif role in ("user", "function", "tool"):
                messages += self._user(parts, position)
            elif role == "system":
                system += [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)]
            else:
                log.warning("skipping content %d with role %r", position, role)
        return messages

    def _model(self, parts: list[Any], position: int) -> list[Message]:
        self.pending.clear()  # a call the client never answered is not waited for past the next model turn
        content: list[Part] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        for index, part in enumerate(parts):
            if not isinstance(part, dict):
                log.warning("skipping a model part that is not an object")
                continue
            signature = field(part, "thoughtSignature")
            if isinstance(signature, str) and signature:
                opened = self._open(signature)
                if opened and opened not in reasoning:
                    reasoning.append(opened)
            call = field(part, "functionCall")
            if part.get("thought") is True:
                continue  # its text is what the client was shown; the signature holds the reasoning
            if isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"]:
                given = isinstance(call.get("id"), str) and bool(call["id"])
                call_id = call["id"] if given else f"call_{position}_{index}"
                arguments = call.get("args")
                calls.append(ToolCall(call_id, call["name"], json.dumps(arguments if isinstance(arguments, dict) else {},
                                                                        ensure_ascii=False)))  # fmt: skip
                self.pending.append(_Pending(call_id, call["name"], given))
            elif isinstance(part.get("text"), str):
                if part["text"]:
                    content.append(TextPart(part["text"]))
            elif signature is None or len(part) > 1:
                log.warning("skipping a model part of kind %s", _kind(part))
        if not (content or reasoning or calls):
            return []
        return [Message("assistant", content, "".join(reasoning) or None, calls)]

    def _open(self, signature: str) -> str | None:
        """The reasoning a signature sealed; None for Google's placeholders and foreign ones."""
        if signature in PLACEHOLDER_SIGNATURES:
            return None
        # The SDKs send back base64 in either alphabet, with or without padding; Fernet's is url-safe.
        token = signature.replace("+", "-").replace("/", "_").rstrip("=")
        token += "=" * (-len(token) % 4)
        opened = self.sealer.open("reasoning", token)
        if opened is None:
            log.warning("skipping a thought signature that is not this server's")
        return opened

    def _user(self, parts: list[Any], position: int) -> list[Message]:
        """Function responses as `tool` messages, the other parts as user messages between them."""
        out: list[Message] = []
        content: list[Part] = []
        for part in parts:
            if not isinstance(part, dict):
                log.warning("skipping a user part that is not an object")
                continue
            response = field(part, "functionResponse")
            if isinstance(response, dict):
                if content:
                    out.append(Message("user", content))
                    content = []
                out.append(self._result(response))
                continue
            if part.get("thought") is True:
                continue
            translated = media(part)
            if translated is not None:
                content.append(translated)
            else:
                log.warning("skipping a user part of kind %s in content %d", _kind(part), position)
        if content:
            out.append(Message("user", content))
        return out

    def _result(self, response: dict[str, Any]) -> Message:
        """A function response as the `tool` message of its call (by id, else name, else order);
        one that answers no call of the last model turn reads as user text."""
        name = response.get("name") if isinstance(response.get("name"), str) else ""
        given = response.get("id") if isinstance(response.get("id"), str) else None
        call = next((c for c in self.pending if given and c.id == given), None)
        call = call or next((c for c in self.pending if c.name == name), None)
        call = call or (self.pending[0] if self.pending else None)
        text = _output(response.get("response"))
        extra = [part for item in response.get("parts") or () if isinstance(item, dict)
                 and (part := media(item)) is not None]  # fmt: skip
        if call is None:
            log.warning("a functionResponse of %r answers no call of the model turn before it: read as text", name)
            return Message("user", [TextPart(f"[result of {name or 'a function'}]\n{text}"), *extra])
        self.pending.remove(call)
        return Message("tool", [TextPart(text), *extra], tool_call_id=call.id)


def _output(response: Any) -> str:
    """What a function returned as the model reads it: the `output` (or `error`) Google's
    convention puts it in, else the whole object as JSON."""
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "result", "content") and isinstance(value, str):
            return value
        if key == "error":
            return "Error: " + (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    if response is None:
        return ""
    return json.dumps(response, ensure_ascii=False)


def media(part: dict[str, Any]) -> Part | None:
    """A text, `inlineData` or `fileData` part as a canonical part (images as images, the rest as
    documents: the attachments stage makes them what the model reads); None for other kinds."""
    if isinstance(part.get("text"), str):
        return TextPart(part["text"])
    inline = field(part, "inlineData")
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        mime = str(field(inline, "mimeType") or "application/octet-stream").lower()
        if mime.startswith("image/"):
            return ImagePart(f"data:{mime};base64,{inline['data']}")
        return FilePart(filename=_filename(field(inline, "displayName"), mime, None), data=inline["data"])
    data = field(part, "fileData")
    if isinstance(data, dict) and isinstance(field(data, "fileUri"), str) and field(data, "fileUri"):
        uri = field(data, "fileUri")
        mime = str(field(data, "mimeType") or mimetypes.guess_type(uri)[0] or "").lower()
        if mime.startswith("image/") and uri.startswith(("http://", "https://")):
            return ImagePart(uri)
        return FilePart(filename=_filename(field(data, "displayName"), mime, uri), url=uri)
    return None


def _filename(given: Any, mime: str, uri: str | None) -> str:
    if isinstance(given, str) and given:
        return given
    if uri and PurePosixPath(uri.split("?", 1)[0]).suffix:
        return PurePosixPath(uri.split("?", 1)[0]).name
    return "document" + (mimetypes.guess_extension(mime) or "")


def _kind(part: dict[str, Any]) -> str:
    return ", ".join(sorted(key for key in part if key not in ("thoughtSignature", "thought_signature"))) or "empty"
