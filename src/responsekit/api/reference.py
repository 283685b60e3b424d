"""`/docs`: the API reference, Swagger UI over the app's OpenAPI document, served from the
installed `swagger-ui-bundle` package. FastAPI's own `/docs` loads Swagger UI from a CDN, which
leaves the page blank on a machine without internet access (FastAPI's documentation,
https://fastapi.tiangolo.com/how-to/custom-docs-ui-assets/, shows this self-hosted setup)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

DOCS = "/docs"
ASSETS = "/docs/assets"

router = APIRouter(include_in_schema=False)
assets = StaticFiles(directory=str(swagger_ui_path))


@router.get(DOCS)
async def reference(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} API reference",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
    )
