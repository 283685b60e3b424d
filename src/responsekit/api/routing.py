"""Routes that read their bodies themselves, documented in the OpenAPI document all the same."""

from __future__ import annotations

import copy
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import Match
from starlette.types import Receive, Scope, Send


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


class RouteMemo:
    """The app's router, trying first the route that took the same method and path last time.

    Starlette tries a router's routes in order (https://www.starlette.io/routing/#route-priority),
    and FastAPI checks every route of an included router, twice for the one chosen: the routes of
    the routers included before the Messages API cost it about 60 µs a request, the Gemini API's
    170 µs (bench/RESULTS.md, One pipeline). The first route to match a method and path fully is
    the same every time while the routes stay as they are, so it is remembered, and the request
    goes to a copy of the router holding that route alone: the router's own code chooses and
    calls it, as it would have. Anything else (no full match, a websocket, the lifespan) goes to
    the router as it is. A path is remembered among the first `SIZE` seen (ids in paths make
    most paths new), which the routes every generation takes are.
    """

    SIZE = 512

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self.app = router.middleware_stack
        self._routes = len(router.routes)
        self._alone: dict[tuple[str, str, str], APIRouter] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        router = self.router
        if len(router.routes) != self._routes:  # routes added since: remembered choices may be wrong
            self._alone.clear()
            self._routes = len(router.routes)
        key = (scope["method"], scope.get("root_path", ""), scope["path"])
        alone = self._alone.get(key)
        if alone is None:
            route = next((route for route in router.routes if route.matches(scope)[0] is Match.FULL), None)
            if route is None:
                await self.app(scope, receive, send)
                return
            alone = copy.copy(router)
            alone.routes = [route]
            if len(self._alone) < self.SIZE:
                self._alone[key] = alone
        scope.setdefault("router", router)  # for `url_for`, which reads every route
        await alone.app(scope, receive, send)
