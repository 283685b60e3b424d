"""The ASGI application: frontends wired to the model router."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from . import __version__
from .api import models
from .api.chat import routes as chat
from .api.http import install_error_handlers
from .api.responses import routes as responses
from .backends.router import ModelRouter
from .config import Settings
from .record import Recorder


def create_app(settings: Settings) -> FastAPI:
    recorder = Recorder(settings.record_dir) if settings.record_dir else None
    router = ModelRouter(settings, recorder)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await router.start()
        yield
        await router.aclose()

    app = FastAPI(title="ResponseKit", version=__version__, lifespan=lifespan)
    app.state.settings = settings
    app.state.router = router
    for frontend in (responses.router, chat.router):
        app.include_router(frontend, prefix="/v1")
        # Also without /v1, for clients whose base URL omits it (llama.cpp's own tests do).
        app.include_router(frontend, include_in_schema=False)
    app.include_router(models.router)
    install_error_handlers(app)
    return app
