"""OpenTelemetry traces: ResponseKit as a command, exporting OTLP/HTTP to a real receiver on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from websockets.sync.client import connect

from responsekit.operations import tracing

from .harness import check_stream, read_sse, serve, start_cli, text_exchange, wait_for

PROMPT = "the secret prompt about herons"
MESSAGES_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "test"}


class Receiver:
    """An OTLP/HTTP trace receiver: every span it was sent, with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.resources: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])])

    async def _traces(self, request: Request) -> Response:
        export = ExportTraceServiceRequest.FromString(await request.body())
        for resource_spans in export.resource_spans:
            self.resources.append(attributes(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs}


@contextmanager
def traced_server(upstream: Any, **env: str) -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    with serve(receiver.app) as collector:
        process, url = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_BSP_SCHEDULE_DELAY": "100", **env})  # fmt: skip
        try:
            yield receiver, url
        finally:
            process.terminate()
            process.wait(20)


def test_one_trace_per_request_with_the_engine_call(upstream):
    with traced_server(upstream) as (receiver, url):
        upstream.push(text_exchange("Hello!"))
        answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": PROMPT, "stream": True})
        events, done = read_sse(iter(answer.text.splitlines()))
        assert done
        response = check_stream(events)
        assert answer.status_code == 200 and response["status"] == "completed"
        http = wait_for(lambda: receiver.named("POST /v1/responses"))[0]
        engine = wait_for(lambda: receiver.named("chat test-model"))[0]
        save = wait_for(lambda: receiver.named("store save_response"))[0]
        orchestration = wait_for(lambda: receiver.named("invoke_agent responsekit"))[0]

        assert http.kind == Span.SPAN_KIND_SERVER and not http.parent_span_id
        assert attributes(http.attributes) | {"http.request.method": "POST", "http.route": "/v1/responses",
                                              "http.response.status_code": 200} == attributes(http.attributes)
        assert engine.trace_id == save.trace_id == orchestration.trace_id == http.trace_id
        assert orchestration.parent_span_id == save.parent_span_id == http.span_id
        assert engine.parent_span_id == orchestration.span_id
        assert attributes(orchestration.attributes) == {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "responsekit",
            "gen_ai.request.model": "test-model", "gen_ai.response.id": response["id"]}  # fmt: skip
        assert engine.kind == Span.SPAN_KIND_CLIENT
        gen_ai = attributes(engine.attributes)
        assert gen_ai | {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "test-model", "gen_ai.response.id": response["id"],
            "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5, "gen_ai.response.finish_reasons": ["stop"],
        } == gen_ai  # fmt: skip
        assert 0 < gen_ai["gen_ai.server.time_to_first_token"] < (engine.end_time_unix_nano - engine.start_time_unix_nano) / 1e9
        assert [event.name for event in engine.events] == ["gen_ai.first_token"]
        assert receiver.resources[0]["service.name"] == "responsekit"

        # The engine's request carried the engine call's span as W3C traceparent.
        version, trace_id, parent_id, flags = upstream.headers[-1]["traceparent"].split("-")
        assert (version, trace_id, parent_id) == ("00", engine.trace_id.hex(), engine.span_id.hex())
        assert int(flags, 16) & 1  # sampled

        # Prompts and answers are not recorded unless asked for.
        recorded = json.dumps([attributes(span.attributes) for span in receiver.spans])
        assert PROMPT not in recorded and "Hello!" not in recorded

        # Chat Completions and Anthropic's Messages: a trace each, the engine call inside.
        upstream.push(text_exchange("chat"), text_exchange("messages"))
        client_trace, client_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        chat = httpx.post(f"{url}/v1/chat/completions", headers={"traceparent": f"00-{client_trace}-{client_span}-01"},
                          json={"model": "test-model", "messages": [{"role": "user", "content": PROMPT}]})  # fmt: skip
        messages = httpx.post(f"{url}/v1/messages", headers=MESSAGES_HEADERS, json={
            "model": "test-model", "max_tokens": 50, "messages": [{"role": "user", "content": PROMPT}]})  # fmt: skip
        assert chat.status_code == messages.status_code == 200
        for route, answer in (("/v1/chat/completions", chat), ("/v1/messages", messages)):
            server = wait_for(lambda route=route: receiver.named(f"POST {route}"))[0]
            call = wait_for(lambda server=server: [span for span in receiver.named("chat test-model")
                                                   if span.parent_span_id == server.span_id])[0]  # fmt: skip
            assert call.trace_id == server.trace_id != http.trace_id
            assert attributes(call.attributes)["gen_ai.response.id"] == answer.json()["id"]
        # A client's own traceparent makes the request's span a child of the client's.
        chat_span = receiver.named("POST /v1/chat/completions")[0]
        assert (chat_span.trace_id.hex(), chat_span.parent_span_id.hex()) == (client_trace, client_span)
        roots = [span for span in receiver.spans if not span.parent_span_id]
        assert len({span.trace_id for span in receiver.spans}) == len(roots) + 1  # each request its own trace
        assert {span.name for span in roots} == {"GET /health", "POST /v1/responses",
                                                 "POST /v1/messages"}  # start_cli's polls are GET /health


def test_background_runs_and_websocket_responses(upstream):
    with traced_server(upstream) as (receiver, url):
        upstream.push(text_exchange("later"))
        queued = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": PROMPT, "background": True})
        assert queued.status_code == 200
        done = wait_for(lambda: (found := httpx.get(f"{url}/v1/responses/{queued.json()['id']}").json())
                        and found["status"] == "completed" and found)  # fmt: skip
        http = wait_for(lambda: receiver.named("POST /v1/responses"))[0]
        orchestration = wait_for(lambda: receiver.named("invoke_agent responsekit"))[0]
        engine = wait_for(lambda: receiver.named("chat test-model"))[0]
        # The run outlives the request that queued it, and stays in its trace.
        assert orchestration.parent_span_id == http.span_id and engine.parent_span_id == orchestration.span_id
        assert orchestration.end_time_unix_nano > http.end_time_unix_nano
        assert attributes(orchestration.attributes)["gen_ai.response.id"] == done["id"]

        # A WebSocket's responses: each its own trace, rooted at its orchestration.
        upstream.push(text_exchange("one"), text_exchange("two"))
        with connect(f"ws{url.removeprefix('http')}/v1/responses") as socket:
            ids = []
            for _ in range(2):
                socket.send(json.dumps({"type": "response.create", "model": "test-model", "input": PROMPT}))
                while (event := json.loads(socket.recv(timeout=30)))["type"] != "response.completed":
                    pass
                ids.append(event["response"]["id"])
        spans = wait_for(lambda: len(found := receiver.named("invoke_agent responsekit")) == 3 and found)
        by_id = {attributes(span.attributes)["gen_ai.response.id"]: span for span in spans}
        roots = [by_id[response_id] for response_id in ids]
        assert all(not root.parent_span_id for root in roots) and roots[0].trace_id != roots[1].trace_id
        calls = wait_for(lambda: len(found := receiver.named("chat test-model")) == 3 and found)
        assert {call.parent_span_id for call in calls} == {span.span_id for span in spans}


def test_message_content_when_asked_for(upstream):
    with traced_server(upstream, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
                       OTEL_SERVICE_NAME="gateway-7") as (receiver, url):  # fmt: skip
        upstream.push(text_exchange("Hello!"))
        answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": PROMPT})
        assert answer.status_code == 200
        engine = wait_for(lambda: receiver.named("chat test-model"))[0]
    recorded = attributes(engine.attributes)
    inputs = json.loads(recorded["gen_ai.input.messages"])
    assert inputs[-1] == {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}
    outputs = json.loads(recorded["gen_ai.output.messages"])
    assert outputs == [{"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}]}]
    assert receiver.resources[0]["service.name"] == "gateway-7"


def test_a_sampled_out_trace_records_nothing_and_tells_the_engine(upstream):
    """A trace the sampler dropped makes no spans below the request (`tracing.sampled_out()`),
    and the engine gets its `traceparent` unsampled, so that its own spans are dropped too."""
    with traced_server(upstream, OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                       OTEL_TRACES_SAMPLER_ARG="1") as (receiver, url):  # fmt: skip
        dropped, kept = "4bf92f3577b34da6a3ce929d0e0e4736", "5cf92f3577b34da6a3ce929d0e0e4737"
        for trace_id, flags in ((dropped, "00"), (kept, "01")):
            upstream.push(text_exchange("Hello!"))
            answer = httpx.post(f"{url}/v1/responses", headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-{flags}"},
                                json={"model": "test-model", "input": PROMPT, "stream": True, "store": True})  # fmt: skip
            assert answer.status_code == 200 and "response.completed" in answer.text
            assert upstream.headers[-1]["traceparent"].split("-")[1::2] == [trace_id, flags]
        wait_for(lambda: receiver.named("store save_response"))
        wait_for(lambda: receiver.named("POST /v1/responses"))
    assert {span.trace_id.hex() for span in receiver.spans if span.name != "GET /health"} == {kept}
    assert {span.name for span in receiver.spans if span.trace_id.hex() == kept} == {
        "POST /v1/responses", "invoke_agent responsekit", "chat test-model", "store save_response"}  # fmt: skip


class GrpcReceiver(TraceServiceServicer):
    """OTLP over gRPC, on a real grpc server."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
        self.spans.extend(span for resource in request.resource_spans for scope in resource.scope_spans
                          for span in scope.spans)  # fmt: skip
        return ExportTraceServiceResponse()

    named = Receiver.named


def test_otlp_over_grpc(upstream):
    receiver = GrpcReceiver()
    server = grpc.server(ThreadPoolExecutor(2))
    add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        process, url = start_cli("--upstream", f"scripted={upstream.url}", "--no-probe", env={
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "100"})  # fmt: skip
        try:
            upstream.push(text_exchange("Hello!"))
            assert httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "hi"}).status_code == 200
            # Each span is waited for: the server's own ends after the answer is sent, and can come
            # in a later batch than the engine's.
            engine = wait_for(lambda: receiver.named("chat test-model"))[0]
            http = wait_for(lambda: receiver.named("POST /v1/responses"))[0]
            orchestration = wait_for(lambda: receiver.named("invoke_agent responsekit"))[0]
            assert engine.parent_span_id == orchestration.span_id and orchestration.parent_span_id == http.span_id
        finally:
            process.terminate()
            process.wait(20)
    finally:
        server.stop(None)


def test_off_without_otel_variables(tmp_path):
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_SDK_DISABLED": "false"})
    # The whole app, served off: the SDK and the exporters are never imported (FastAPI itself
    # imports OpenTelemetry's API, for its own native spans).
    script = (
        "import sys\nfrom fastapi.testclient import TestClient\nfrom responsekit.operations import tracing\n"
        "from responsekit.app import create_app\nfrom responsekit.config import Settings\n"
        "settings = Settings(probe=False, default_model_fallback=False, data_dir=sys.argv[1])\n"
        "with TestClient(create_app(settings)) as client:\n"
        "    assert client.get('/health').status_code == 200\n"
        "assert tracing.active is None\n"
        "print(sorted(name for name in sys.modules if name.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))\n"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
