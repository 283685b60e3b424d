"""OpenTelemetry traces, configured by the standard `OTEL_*` variables.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and
`OTEL_SDK_DISABLED` is not true). Off, nothing of OpenTelemetry is imported and each hook
costs one test of `active`; on, `configure()` builds the SDK's tracer provider with an OTLP
exporter (`http/protobuf` by default, `grpc` through `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`)
and a batch processor, which read their other variables themselves.

One trace per request: the HTTP server span (`api/request_ids.py`), a response's orchestration
(`invoke_agent responsekit`, its generations and server-run tools: `orchestrate()`), a `chat
{model}` client span per engine call with the GenAI semantic conventions' attributes
(`generate()`), MCP and file_search calls, store writes (`span()`). A background run's
orchestration stays a child of the request that queued it, which has ended by then; a
WebSocket's responses have no HTTP request of their own, so each one's orchestration is the root
of its trace. The engine call's span travels to the engine as
W3C `traceparent` (`engine_headers()`), so an engine's own spans (vLLM's) join the trace.
Prompts and answers are recorded only with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`,
as the conventions ask.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager, aclosing, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from ..canonical.conversation import GenerationRequest, TextPart
from ..canonical.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallStart,
    Usage,
)
from . import logs

if TYPE_CHECKING:
    from ..backends import Backend

log = logging.getLogger(__name__)

SERVICE_NAME = "responsekit"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
FIRST_CONTENT = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallStart)
"""What counts as the first token for the time-to-first-token attribute."""


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (the one check made when they are off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


class Tracing:
    """The SDK's pieces, built only when traces are on."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                    or "http/protobuf").strip()  # fmt: skip
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
        else:
            raise ValueError(f"OTLP protocol {protocol!r} is not supported (http/protobuf or grpc)")
        resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        # Not the global provider: FastAPI's native spans (three more a request) would nest
        # between the server span and ours; this trace is the gateway's own.
        self.tracer = self.provider.get_tracer("responsekit")
        self.capture_content = environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"
        self._context = context
        self._propagate = propagate
        self._trace = trace
        self._server = trace.SpanKind.SERVER
        self._client = trace.SpanKind.CLIENT

    # --- the HTTP request ---------------------------------------------------------------

    def start_server_span(self, scope: dict[str, Any]) -> tuple[Any, object]:
        """The request's span, made current (ended by `end_server_span`); a client's
        `traceparent` makes it a child of the client's trace."""
        carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
                   if name in (b"traceparent", b"tracestate")}  # fmt: skip
        parent = self._propagate.extract(carrier) if carrier else None
        span = self.tracer.start_span(scope["method"], context=parent, kind=self._server, attributes={
            "http.request.method": scope["method"], "url.path": scope["path"], "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        })  # fmt: skip
        return span, self._context.attach(self._trace.set_span_in_context(span))

    def end_server_span(self, span: Any, token: object, scope: dict[str, Any], status: int | None) -> None:
        self._context.detach(token)
        info = logs.current.get()
        route = info.route if info is not None else None
        if route:  # the span's name stays bounded: the route, not the path (OpenTelemetry's HTTP conventions)
            span.update_name(f"{scope['method']} {route}")
            span.set_attribute("http.route", route)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(self._trace.StatusCode.ERROR)
        span.end()

    # --- engine calls -------------------------------------------------------------------

    async def generate(self, backend: Backend, request: GenerationRequest, response_id: str | None) -> AsyncIterator[Event]:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": request.model,
                                      "gen_ai.provider.name": getattr(backend, "kind", backend.name)}  # fmt: skip
        for name, value in (("max_tokens", request.max_output_tokens), ("temperature", request.temperature),
                            ("top_p", request.top_p), ("seed", request.seed)):  # fmt: skip
            if value is not None:
                attributes[f"gen_ai.request.{name}"] = value
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        if self.capture_content:
            attributes["gen_ai.input.messages"] = json.dumps(_messages(request), ensure_ascii=False)
        span = self.tracer.start_span(f"chat {request.model}", kind=self._client, attributes=attributes)
        current = self._trace.set_span_in_context(span)
        started = time.perf_counter()
        first_token = False
        text: list[str] = []
        events = backend.generate(request)
        try:
            # Closed here, not left to the garbage collector: closing it ends the engine's request.
            async with aclosing(events):  # type: ignore[type-var]
                while True:
                    # The span is current while the engine's request goes out (its `traceparent`),
                    # which is before the first event, a failover's retry included (`backends/pool.py`);
                    # after it, each event costs no context switch (a token's cost counts: `bench/traces.py`).
                    event = await anext(events, None) if first_token else await self._step(current, events)
                    if event is None:
                        return
                    if not first_token and isinstance(event, FIRST_CONTENT):
                        first_token = True
                        span.set_attribute("gen_ai.server.time_to_first_token", time.perf_counter() - started)
                        span.add_event("gen_ai.first_token")
                    if isinstance(event, TextDelta):  # the common event first
                        if self.capture_content:
                            text.append(event.text)
                    elif isinstance(event, Usage):
                        span.set_attributes({"gen_ai.usage.input_tokens": event.input_tokens,
                                             "gen_ai.usage.output_tokens": event.output_tokens})  # fmt: skip
                    elif isinstance(event, Finish):
                        span.set_attribute("gen_ai.response.finish_reasons", [event.reason])
                    elif isinstance(event, Error):
                        span.set_attribute("error.type", event.code)
                        span.set_status(self._trace.StatusCode.ERROR, event.message)
                    yield event
        except GeneratorExit:  # its consumer had what it wanted
            raise
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(self._trace.StatusCode.ERROR, str(exc))
            raise
        finally:
            if self.capture_content:
                output = [{"role": "assistant", "parts": [{"type": "text", "content": "".join(text)}]}]
                span.set_attribute("gen_ai.output.messages", json.dumps(output, ensure_ascii=False))
            span.end()

    async def orchestrate(self, events: AsyncIterator[Event], attributes: dict[str, Any]) -> AsyncIterator[Event]:
        span = self.tracer.start_span("invoke_agent responsekit", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": SERVICE_NAME, **attributes})  # fmt: skip
        current = self._trace.set_span_in_context(span)
        try:
            async with aclosing(events):  # type: ignore[type-var]
                while True:
                    event = await self._step(current, events)  # may start an engine call or a tool
                    if event is None:
                        return
                    if isinstance(event, Error):
                        span.set_attribute("error.type", event.code)
                        span.set_status(self._trace.StatusCode.ERROR, event.message)
                    yield event
        except GeneratorExit:  # its consumer had what it wanted (a response ends at its terminal event)
            raise
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            raise
        finally:
            span.end()

    async def _step(self, current: Any, events: AsyncIterator[Event]) -> Event | None:
        """The next event, computed with `current` (a span's context) as the current context. It is
        attached around the step only, never across a `yield`: a generator's consumer may resume
        it from another context."""
        token = self._context.attach(current)
        try:
            return await anext(events, None)
        finally:
            self._context.detach(token)

    def sampled_out(self) -> bool:
        """Whether the current trace was sampled out (`OTEL_TRACES_SAMPLER`): then a child span
        records nothing under the SDK's samplers (parent-based, or by trace id), so none is made
        and the events pass untouched; the engine still gets the unsampled `traceparent`."""
        context = self._trace.get_current_span().get_span_context()
        return context.is_valid and not context.trace_flags.sampled

    def engine_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        self._propagate.inject(headers)
        return headers

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span

    def shutdown(self) -> None:
        self.provider.shutdown()


NO_SPAN: AbstractContextManager[None] = nullcontext()
active: Tracing | None = None
"""The SDK's pieces when traces are on; None when off (every hook tests this first)."""


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn traces on when the environment asks for them; whether they are on."""
    global active
    if active is None and wanted(environ):
        try:
            active = Tracing(environ)
        except (ImportError, ValueError) as exc:
            log.warning("OpenTelemetry traces are off: %s (install responsekit[otel])", exc)
            return False
        log.info("OpenTelemetry traces are on")
    return active is not None


def shutdown() -> None:
    """Export what is left and stop (the app's end)."""
    global active
    if active is not None:
        active.shutdown()
        active = None


def generate(backend: Backend, request: GenerationRequest, response_id: str | None = None) -> AsyncIterator[Event]:
    """`backend.generate(request)`, in a `chat {model}` span when traces are on."""
    if active is None or active.sampled_out():
        return backend.generate(request)
    return active.generate(backend, request, response_id)


def orchestrate(events: AsyncIterator[Event], attributes: dict[str, Any]) -> AsyncIterator[Event]:
    """A response's canonical events (generations and server-run tools) in one span when traces are on."""
    if active is None or active.sampled_out():
        return events
    return active.orchestrate(events, attributes)


def span(name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[Any]:
    """A span around a block (a store write, a tool call) when traces are on."""
    if active is None or active.sampled_out():
        return NO_SPAN
    return active.span(name, attributes)


def engine_headers() -> dict[str, str]:
    """`traceparent` (and `tracestate`) of the current span for an engine's request; empty when off."""
    if active is None:
        return {}
    return active.engine_headers()


def _messages(request: GenerationRequest) -> list[dict[str, Any]]:
    """The prompt in the conventions' `gen_ai.input.messages` shape (text parts and tool calls)."""
    messages = []
    for message in request.messages:
        parts: list[dict[str, Any]] = [{"type": "text", "content": part.text} for part in message.content
                                       if isinstance(part, TextPart)]  # fmt: skip
        parts += [{"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
                  for call in message.tool_calls]  # fmt: skip
        if message.tool_call_id is not None:
            parts = [{"type": "tool_call_response", "id": message.tool_call_id,
                      "response": "".join(part["content"] for part in parts if part["type"] == "text")}]  # fmt: skip
        messages.append({"role": message.role, "parts": parts})
    return messages
