"""The ASGI application: frontends wired to the orchestrator, the model router and the store."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from . import __version__
from .api import admin as admin_api
from .api import containers as containers_api
from .api import conversations, front, models, reference
from .api import files as files_api
from .api import metrics as metrics_api
from .api import vector_stores as vector_stores_api
from .api.auth import Keys, key_hash
from .api.chat import routes as chat
from .api.gemini import routes as gemini
from .api.http import JSONResponse, install_error_handlers
from .api.messages import routes as messages
from .api.request_ids import RequestIds
from .api.responses import render, websocket
from .api.responses import routes as responses
from .api.routing import RouteMemo
from .api.ui import playground
from .api.ui import routes as ui
from .backends.router import ModelRouter
from .config import Settings
from .containers.service import Containers
from .files.service import VectorStores
from .operations import logs, tracing
from .operations.metrics import Metrics, PoolMembers, ScrapeTime
from .operations.record import Recorder
from .orchestration.attachments import Attachments
from .orchestration.limits import Limiter
from .orchestration.orchestrator import Orchestrator
from .orchestration.pipeline import Pipeline
from .orchestration.runs import Runs
from .orchestration.sealing import Sealer
from .orchestration.usage import UsageLedger
from .store import Store
from .store.api_keys import KeyTable, Limits
from .store.counters import Counters
from .tools.outbound import UrlPolicy
from .tools.web import web_search_from

log = logging.getLogger(__name__)


class Gateway(FastAPI):
    """FastAPI with `RequestIds` outermost: around Starlette's error middleware, which answers
    a bug's 500 itself (user middleware sits inside it), so that answer carries its id too."""

    def build_middleware_stack(self) -> ASGIApp:
        return RequestIds(super().build_middleware_stack(), self.state.metrics)


@cache
def _routes(*, metrics: bool) -> tuple[BaseRoute, ...]:
    """Every route, in the order they are tried: made once per process and shared by its apps.

    FastAPI (0.165) works out the routes of an included router (each parameter's and body's
    validator, through pydantic) at the first request that reaches them, once for each router
    that includes it: 0.15 s of CPU for every app made. What it works out holds nothing of an app
    (these routers are included into a router of their own, not into an app), so the apps of one
    process (the test suite makes one for each test) share it.
    """
    routes = APIRouter(default_response_class=JSONResponse)
    # Routers are tried in order, each route's pattern in turn: the generation routes come early
    # (/v1/messages after the files APIs cost a tenth of a request's CPU). The messages
    # router comes after the models API, whose `/v1/models` answers before its doubled-/v1 one.
    for frontend in (responses.router, websocket.router, conversations.router, chat.router, models.api,
                     messages.router, files_api.router, vector_stores_api.router, containers_api.router):
        routes.include_router(frontend, prefix="/v1")
        # Also without /v1, for clients whose base URL omits it (llama.cpp's own tests do).
        routes.include_router(frontend, include_in_schema=False)
    routes.include_router(gemini.router)  # Google's Gemini API, under /v1beta (and /v1, /v1alpha) itself
    routes.include_router(models.health)
    routes.include_router(front.router)  # `/`: what runs here, how to connect
    routes.include_router(reference.router)  # `/docs`
    routes.mount(reference.ASSETS, reference.assets)
    routes.include_router(admin_api.router)
    routes.include_router(admin_api.usage_router)
    if metrics:
        routes.include_router(metrics_api.router)
    routes.include_router(ui.router)  # the inspector, last: no generation route tries it first
    routes.include_router(playground.router)  # a chat page on the inspector's session
    routes.mount("/ui/static", ui.static)
    return tuple(routes.routes)


def create_app(settings: Settings) -> FastAPI:
    if settings.log_level.lower() != "debug":
        # httpx logs every upstream request at INFO: a line per request is noise, and costs
        # a tenth of a streamed response's CPU time.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    logs.install_record_factory()
    logs.plain_access_log()
    recorder = Recorder(settings.record_dir) if settings.record_dir else None
    router = ModelRouter(settings, recorder)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tracing.configure()  # on when OTEL_* variables ask for it
        store = await Store.open(settings.database)
        if metrics is not None:
            store.database = metrics.timed(store.database)
        runs = Runs(store, settings.lease_seconds, render.resumed)
        app.state.store = store
        keys.table = KeyTable(store.database)
        await keys.table.start()
        limiter = app.state.limiter = Limiter(Counters(store.database), Limits(**settings.default_limits.model_dump()))
        limiter.start()
        usage = app.state.usage = UsageLedger(store.database)
        usage.start()
        app.state.vector_stores = await VectorStores.open(settings, store.database)
        if metrics is not None:
            metrics.registry.register(ScrapeTime(runs.states, app.state.vector_stores.ingestor.queue))
            metrics.registry.register(PoolMembers(router.members))
        await app.state.vector_stores.start()
        app.state.containers = await Containers.open(settings, store.database, app.state.vector_stores)
        await app.state.containers.start()
        sealer = Sealer.from_settings(settings.data_dir, settings.sealing_keys)
        urls = UrlPolicy(settings.allowed_hosts)
        web, app.state.web_search_off = web_search_from(
            settings.web_search_provider, settings.web_search_url, settings.web_search_api_key,
            settings.web_search_max_results, urls, metrics.web_operation if metrics is not None else None,
        )
        if web is None:
            log.info("web search off: %s (docs/web-search.md)", app.state.web_search_off)
        else:
            await web.start()  # an engine that cannot be reached now is logged, never fatal
        app.state.web_search = web
        attachments = Attachments(
            urls, app.state.vector_stores, store, router, vision_model=settings.vision_model,
            max_image_bytes=settings.max_image_bytes, max_document_chars=settings.max_document_chars,
        )  # fmt: skip
        pipeline = app.state.pipeline = Pipeline(
            router, attachments, limiter, usage if settings.record_usage else None, app.state.vector_stores, urls, web,
            queue_timeout=settings.queue_timeout, max_queue_per_key=settings.max_queue_per_key,
            containers=app.state.containers,
        )  # fmt: skip
        app.state.orchestrator = Orchestrator(pipeline, store, runs, sealer, settings.summarizer_model)
        await runs.start()
        try:  # a model that fails to load still closes what was opened, so the process ends
            await router.start()
            if not keys.required:
                if settings.listen_host in ("127.0.0.1", "localhost", "::1"):
                    log.info("no API keys configured: listening on %s only", settings.listen_host)
                else:
                    log.warning("no API keys configured: anyone who reaches %s can use this server", settings.listen_host)
            yield
        finally:
            await runs.stop(settings.shutdown_timeout)
            if web is not None:
                await web.aclose()
            await router.aclose()
            await app.state.containers.close()
            await app.state.vector_stores.close()
            await limiter.stop()
            await usage.stop()
            await keys.table.stop()
            await store.close()
            tracing.shutdown()

    # FastAPI's own /docs and /redoc load their scripts from CDNs: /docs is served from a package instead.
    # FastAPI's native OpenTelemetry is off: the gateway traces its requests itself (`operations/tracing.py`),
    # and FastAPI's asks the environment for OpenTelemetry's providers on every request
    # (https://fastapi.tiangolo.com/advanced/opentelemetry/; the `telemetry` setting since FastAPI 0.162).
    app = Gateway(title="ResponseKit", version=__version__, lifespan=lifespan, default_response_class=JSONResponse,
                  docs_url=None, redoc_url=None, telemetry={"tracing": False, "metrics": False, "logs": False})  # fmt: skip
    app.state.settings = settings
    metrics = app.state.metrics = Metrics(router.serves) if settings.metrics else None
    app.state.router = router
    app.state.web_search, app.state.web_search_off = None, None
    app.state.recorder = recorder
    keys = app.state.keys = Keys(frozenset(key_hash(key) for key in settings.api_keys),
                                 frozenset(key_hash(key) for key in settings.admin_api_keys))
    app.router.routes.extend(_routes(metrics=metrics is not None))
    app.router.middleware_stack = RouteMemo(app.router)
    app.add_exception_handler(ui.Shown, ui.shown)  # the inspector's page instead of the one asked for
    install_error_handlers(app)
    return app

