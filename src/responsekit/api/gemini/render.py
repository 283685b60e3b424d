"""Canonical events -> Gemini API `GenerateContentResponse` chunks, and the response they fold into.

Each chunk carries one candidate with the parts just made: thought parts (`thought: true`,
shown with `includeThoughts`), text parts, and `functionCall` parts with `id`, `name` and the
`args` object (whole, once the engine finished writing them). The last chunk carries the
`finishReason`, the `usageMetadata` and, when the server searched or read pages, the
`groundingMetadata` and `urlContextMetadata`. A non-streaming answer is the fold of the same
chunks (`response`): adjacent text parts of one kind joined.

The reasoning of a turn is sealed (`sealing.py`) into the `thoughtSignature` of the first part
that follows it, as Gemini puts its signatures on the part after the thoughts (a function call,
or text; an empty text part when nothing follows), so a client that drops thought parts from its
history, as Gemini CLI does, still sends the reasoning back.

Web searches and page reads the server runs (`googleSearch`, `urlContext`) stay out of the
parts, as Gemini's own do: what they found is in `groundingMetadata` (the queries, each source
as a `groundingChunks` entry, and each claim the answer cites as a `groundingSupports` entry, in
UTF-8 byte offsets as Google counts them) and `urlContextMetadata` (each page read and whether it
could be). As in Gemini's answers, the text carries no citation marks: the `[n]` the model writes
after a claim (naming a source it read) is taken out of the text as it streams (a possible mark's
start held back until the next piece) and becomes the support of the claim before it, which
clients mark themselves (Gemini CLI writes `[n]` at each support's end and lists the sources).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ...canonical.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    Usage,
)
from ...canonical.ids import new_id
from ...canonical.server_tools import CITATION

FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}
STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
            409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
            504: "DEADLINE_EXCEEDED"}  # fmt: skip
"""HTTP status -> Google's `status` (google.rpc.Code); other 4xx are INVALID_ARGUMENT, other 5xx UNAVAILABLE."""

_MARK = re.compile(r"[ \t]*" + CITATION.pattern)
"""A citation mark, with the spaces before it."""
_HELD = re.compile(r"[ \t]*(?:\[\d{0,4})?$")
"""The end of a piece of text that may be the start of a mark."""
_CLAIM_START = re.compile(r"(?:[.!?]\s+|\n+)")


def status_name(status: int) -> str:
    return STATUSES.get(status) or ("UNAVAILABLE" if status >= 500 else "INVALID_ARGUMENT")


def error_envelope(status: int, message: str) -> dict[str, Any]:
    """Google's error body (`google.rpc.Status` as its JSON API writes it)."""
    return {"error": {"code": status, "message": message, "status": status_name(status)}}


def error_message(error: Error) -> str:
    """The engine's message; a context overflow in Google's words, with the prompt's tokens and
    the window ("The input token count (N) exceeds the maximum number of tokens allowed (M).")."""
    if error.code == "context_length_exceeded" and error.prompt_tokens is not None and error.window is not None:
        return (f"The input token count ({error.prompt_tokens}) exceeds the maximum number of tokens allowed "
                f"({error.window}).")  # fmt: skip
    return error.message


class GeminiRenderer:
    def __init__(
        self,
        model: str,
        *,
        seal: Callable[[str], str],
        show_thoughts: bool = False,
        server_tools: Mapping[str, str] | None = None,
        input_tokens: int | None = None,
    ) -> None:
        """`server_tools`: the model-facing names of the tools the server runs, and what each is
        (`web_search`, `web_fetch`); `input_tokens`: the prompt's count, should the engine report
        no usage."""
        self.id = new_id("gen")
        self.model = model
        self.finished = False
        self.error: Error | None = None
        self.response: dict[str, Any] | None = None
        """The folded `GenerateContentResponse`, once the stream finished."""
        self._seal = seal
        self._show_thoughts = show_thoughts
        self._server_tools = dict(server_tools or {})
        self._input_tokens = input_tokens
        self._parts: list[dict[str, Any]] = []
        self._reasoning: list[str] = []
        """The reasoning since the last part that carried a signature."""
        self._text: list[str] = []
        """The answer's text as sent (without the citation marks taken out)."""
        self._sent_chars = 0
        self._cites = "web_search" in self._server_tools.values()
        """Whether the model may cite search results as `[n]` (taken out of the text)."""
        self._held = ""
        self._marks: list[tuple[int, list[int]]] = []
        """Where marks were taken out of the text (a character offset) and the sources each named."""
        self._calls: dict[int, tuple[str, str, list[str]]] = {}
        self._hidden: dict[int, str] = {}
        """Server-run calls of the current generation: canonical index -> the tool it is."""
        self._queries: list[str] = []
        self._sources: dict[int, dict[str, str]] = {}
        self._searched = False
        self._pages: list[dict[str, str]] = []
        self._usage: Usage | None = None
        self._output_chars = 0
        self._malformed: str | None = None

    def start(self) -> list[dict[str, Any]]:
        return []

    def feed(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, (TextDelta, RefusalDelta)):
            return self._answer(event.text)
        out = self._release() if self._held else []
        return out + self._other(event)

    def _other(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, ReasoningDelta):
            if not event.text:
                return []
            self._reasoning.append(event.text)
            self._output_chars += len(event.text)
            return self._emit({"text": event.text, "thought": True}, sign=False) if self._show_thoughts else []
        if isinstance(event, ToolCallDelta):
            if event.index in self._calls:
                self._calls[event.index][2].append(event.arguments)
            return []
        if isinstance(event, ToolCallStart):
            if event.name in self._server_tools:
                self._hidden[event.index] = self._server_tools[event.name]
            else:
                self._calls[event.index] = (event.id, event.name, [])
            return []
        if isinstance(event, ToolCallEnd):
            return self._call(event.index)
        if isinstance(event, ToolResult):
            self._server_result(event)
            return []
        if isinstance(event, Usage):  # one per generation: several when the server searched between
            self._usage = event if self._usage is None else Usage(
                self._usage.input_tokens + event.input_tokens, self._usage.output_tokens + event.output_tokens,
                self._usage.cached_tokens + event.cached_tokens, self._usage.reasoning_tokens + event.reasoning_tokens)
            return []
        if isinstance(event, Finish):
            return self._finish(event)
        if isinstance(event, Error):
            self.finished = True
            self.error = event
            return [error_envelope(event.status, error_message(event))]
        return []

    # --- parts -------------------------------------------------------------------------------

    def _answer(self, text: str) -> list[dict[str, Any]]:
        """A piece of the answer, its citation marks taken out when the model read search results."""
        if self._cites:
            text = self._held + text
            held = _HELD.search(text)
            assert held is not None  # the pattern matches the empty end of any text
            self._held = text[held.start():]
            text = self._unmarked(text[: held.start()])
        return self._sent(text)

    def _release(self) -> list[dict[str, Any]]:
        """Text held back as a possible mark's start, once something else comes."""
        text, self._held = self._held, ""
        return self._sent(self._unmarked(text))

    def _sent(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        self._text.append(text)
        self._sent_chars += len(text)
        return self._emit({"text": text})

    def _unmarked(self, text: str) -> str:
        """`text` without the marks naming sources the model read, each noted where it was."""
        kept: list[str] = []
        last = length = 0
        for mark in _MARK.finditer(text):
            number = int(mark.group(1))
            if number not in self._sources:
                continue
            kept.append(text[last: mark.start()])
            length += mark.start() - last
            last = mark.end()
            at = self._sent_chars + length
            if self._marks and self._marks[-1][0] == at:
                self._marks[-1][1].append(number)
            else:
                self._marks.append((at, [number]))
        kept.append(text[last:])
        return "".join(kept)

    def _emit(self, part: dict[str, Any], *, sign: bool = True) -> list[dict[str, Any]]:
        """One chunk holding `part`, signed with the reasoning before it; folded into the answer."""
        if sign and self._reasoning:
            part["thoughtSignature"] = self._seal("".join(self._reasoning))
            self._reasoning = []
        if not part.get("thought"):  # thoughts are counted as they come, shown or not
            self._output_chars += len(part.get("text") or "")
        self._fold(part)
        return [self._chunk({"content": {"parts": [part], "role": "model"}, "index": 0})]

    def _fold(self, part: dict[str, Any]) -> None:
        last = self._parts[-1] if self._parts else None
        if (last is not None and "text" in last and "text" in part and "thoughtSignature" not in part
                and last.get("thought") == part.get("thought")):  # fmt: skip
            last["text"] += part["text"]
        else:
            self._parts.append(dict(part))

    def _call(self, index: int) -> list[dict[str, Any]]:
        """A client call as a `functionCall` part; arguments that are no JSON object make the answer
        a `MALFORMED_FUNCTION_CALL`, as Gemini's own are."""
        if index not in self._calls:
            return []
        call_id, name, fragments = self._calls.pop(index)
        text = "".join(fragments)
        self._output_chars += len(text)
        try:
            arguments = json.loads(text) if text.strip() else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            self._malformed = f"Malformed function call: {name} was called with arguments that are not a JSON object."
            return []
        return self._emit({"functionCall": {"id": call_id, "name": name, "args": arguments}})

    def _server_result(self, result: ToolResult) -> None:
        """What a search or page read the server ran found, for the answer's metadata."""
        tool = self._hidden.pop(result.index, None)
        data = result.data or {}
        if tool == "web_fetch":
            page = data.get("fetch")
            url = (data.get("action") or {}).get("url") or (page or {}).get("url") or ""
            ok = not result.error and isinstance(page, dict)
            self._pages.append({"retrievedUrl": url, "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_SUCCESS" if ok
                                else "URL_RETRIEVAL_STATUS_ERROR"})  # fmt: skip
        elif tool == "web_search":
            self._searched = True
            action = data.get("action") or {}
            if action.get("type") == "search" and action.get("query") and action["query"] not in self._queries:
                self._queries.append(action["query"])
            for number, source in (data.get("citations") or {}).items():
                self._sources.setdefault(int(number), {"uri": source.get("url") or "", "title": source.get("title") or ""})

    # --- the end -----------------------------------------------------------------------------

    def _finish(self, event: Finish) -> list[dict[str, Any]]:
        self.finished = True
        parts: list[dict[str, Any]] = []
        if self._reasoning:  # reasoning and nothing after it: its signature on an empty text part
            parts.append({"text": "", "thoughtSignature": self._seal("".join(self._reasoning))})
            self._reasoning = []
            self._fold(parts[-1])
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if self._malformed is not None:
            candidate["finishReason"] = "MALFORMED_FUNCTION_CALL"
            candidate["finishMessage"] = self._malformed
        else:
            candidate["finishReason"] = FINISH_REASONS.get(event.reason, "STOP")
        if self._searched:
            candidate["groundingMetadata"] = self._grounding()
        if self._pages:
            candidate["urlContextMetadata"] = {"urlMetadata": self._pages}
        last = {**self._chunk(candidate), "usageMetadata": self._usage_metadata()}
        folded = {**candidate, "content": {"parts": self._parts, "role": "model"}}
        self.response = {**last, "candidates": [folded]}
        return [last]

    def _chunk(self, candidate: dict[str, Any]) -> dict[str, Any]:
        return {"candidates": [candidate], "modelVersion": self.model, "responseId": self.id}

    def _grounding(self) -> dict[str, Any]:
        """The queries, the sources (`groundingChunks`, in the order the model numbered them) and the
        claims citing them (`groundingSupports`: from the sentence's start to where the marks were)."""
        numbers = sorted(self._sources)
        position = {number: index for index, number in enumerate(numbers)}
        supports = []
        text = "".join(self._text)
        start = 0
        for at, cited in self._marks:
            claim_from = max([start, *(m.end() for m in _CLAIM_START.finditer(text, start, at))])
            start = at
            claim = text[claim_from:at].lstrip()
            if not claim:
                continue
            begin = len(text[: at - len(claim)].encode())
            supports.append({"segment": {"startIndex": begin, "endIndex": begin + len(claim.encode()), "text": claim},
                             "groundingChunkIndices": sorted({position[n] for n in cited})})  # fmt: skip
        return {"webSearchQueries": self._queries, "groundingChunks": [{"web": self._sources[n]} for n in numbers],
                "groundingSupports": supports}  # fmt: skip

    def _usage_metadata(self) -> dict[str, Any]:
        """The engine's counts in Google's terms: candidates without thoughts, thoughts apart, the
        total of both and the prompt. Without an engine count, the prompt's and an estimate."""
        if self._usage is None:
            prompt = self._input_tokens or 0
            output = max(1, self._output_chars // 4)
            return {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output}
        usage = self._usage
        thoughts = min(usage.reasoning_tokens, usage.output_tokens)
        metadata = {"promptTokenCount": usage.input_tokens, "candidatesTokenCount": usage.output_tokens - thoughts,
                    "totalTokenCount": usage.input_tokens + usage.output_tokens}  # fmt: skip
        if thoughts:
            metadata["thoughtsTokenCount"] = thoughts
        if usage.cached_tokens:
            metadata["cachedContentTokenCount"] = min(usage.cached_tokens, usage.input_tokens)
        return metadata
