"""`GET /metrics`: the Prometheus text exposition (a generation is observed from `callers.caller`).

Owner-scoped like the API: with keys configured a scrape needs one; without keys the server
listens on loopback only. `--no-metrics` removes the route (a 404) and every observation.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.exposition import choose_encoder

from ..operations.metrics import Metrics
from .auth import authorize

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def scrape(request: Request) -> Response:
    authorize(request)
    metrics: Metrics = request.app.state.metrics
    encode, content_type = choose_encoder(request.headers.get("accept", ""))  # OpenMetrics when the scraper asks
    return Response(encode(metrics.registry), media_type=content_type)

