"""`GET /v1/models` and `GET /health`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    return {"object": "list", "data": request.app.state.router.list_models()}


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    return request.app.state.router.health()
