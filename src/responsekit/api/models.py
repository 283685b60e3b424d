"""`GET /v1/models` and `GET /health`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from .auth import Owner

api = APIRouter()
health = APIRouter()


@api.get("/models")
async def list_models(request: Request, owner: Owner) -> dict[str, Any]:
    return {"object": "list", "data": request.app.state.router.list_models()}


@health.get("/health")
async def check_health(request: Request) -> dict[str, Any]:
    return request.app.state.router.health()
