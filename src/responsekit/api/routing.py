"""Routes that read their bodies themselves, documented in the OpenAPI document all the same."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` documenting the body a route reads itself (`read_body`) as `model`.

    Routes read their bodies by hand (size and depth limits, OpenAI's errors), so FastAPI
    does not see them; this puts the model's schema, its definitions inlined, in the
    OpenAPI document for clients and schema-driven tests.
    """
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref", "")
            if reference.startswith("#/$defs/"):
                rest = {key: value for key, value in node.items() if key != "$ref"}
                return inline({**definitions[reference.removeprefix("#/$defs/")], **rest})
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}


Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]


class PlainRoute(APIRoute):
    """A route FastAPI documents but does not drive: its endpoint takes the request alone.

    FastAPI's per-request machinery (solving the endpoint's parameters and dependencies,
    serializing its return value) cost about 60 µs a request, a tenth of a streamed
    response's CPU time. The routes every generation takes (`POST /responses`,
    `POST /chat/completions`) read their bodies themselves anyway (`read_body`), so they
    skip it, and authorize the request themselves. Their bodies' schemas are still in
    the OpenAPI document (`json_body`).
    """

    def get_route_handler(self) -> Endpoint:
        return self.endpoint  # type: ignore[return-value]


def plain_post(router: APIRouter, path: str, body: type[BaseModel]) -> Callable[[Endpoint], Endpoint]:
    """Register the decorated endpoint as `POST path` on a `PlainRoute`, its body documented as `body`."""

    def register(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(path, endpoint, methods=["POST"], openapi_extra=json_body(body),
                             route_class_override=PlainRoute)  # fmt: skip
        return endpoint

    return register
