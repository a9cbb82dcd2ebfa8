"""Model service: OpenAI-compatible serving of the K3 architecture.

The engine behind the API is chosen by ``K3STACK_MODEL__ENGINE`` (see
:mod:`services.model.serving.backends`) and starts in the app's lifespan: the port opens once the
model is loaded (or the upstream is reached), and a backend that cannot start stops the service
with its reason rather than serving errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from prometheus_client import Gauge

from services.model.serving.admission import parse_admission_classes
from services.model.serving.backends import Backend, create_backend
from services.model.serving.limits import BodySizeLimit
from services.model.serving.metrics import MEMORY_METRICS, RequestMetrics
from services.model.serving.prefix_cache import PREFIX_CACHE_METRICS
from services.model.serving.response_store import ResponseStore
from services.model.serving.routes import install_openai_errors, router
from shared.app import create_app as create_service_app
from shared.settings import Settings, get_settings

log = logging.getLogger("k3stack.model")


def _engine_gauges(app: FastAPI, num_classes: int) -> None:
    """Queue depths, cache usage and token counters of the reference engine, read at scrape
    time."""
    metrics = app.state.metrics

    def reading(key: str):  # type: ignore[no-untyped-def]
        def read() -> float:
            return float(app.state.backend.health().get(key, 0))

        return read

    for key, doc in (
        ("running", "Requests being decoded."),
        ("waiting", "Requests waiting for admission."),
        ("generated_tokens", "Tokens generated since start."),
        ("computed_tokens", "Tokens run through the model since start."),
        ("preemptions", "Requests preempted for memory since start."),
        ("aborted", "Requests aborted (client gone) since start."),
        ("cache_usage", "Fraction of the latent KV cache blocks in use."),
        *MEMORY_METRICS.items(),
        *PREFIX_CACHE_METRICS.items(),
        *(
            (f"class{k}_{what}", f"Admission class {k}: {doc}")
            for k in range(num_classes)
            for what, doc in (
                ("waiting", "requests waiting now."),
                ("admitted", "requests admitted since start."),
                ("wait_steps", "request-steps spent waiting since start."),
            )
        ),
    ):
        gauge = Gauge(f"k3stack_model_engine_{key}", doc, registry=metrics.registry)
        gauge.set_function(reading(key))


def create_app(settings: Settings | None = None, backend: Backend | None = None) -> FastAPI:
    """Build the service; ``backend`` overrides the one the settings choose (tests)."""
    settings = settings or get_settings()
    chosen = backend or create_backend(settings.model)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = None
        try:
            if settings.model.response_store_items:
                store = await asyncio.to_thread(
                    ResponseStore,
                    settings.database_url or "",
                    max_items=settings.model.response_store_items,
                    ttl_s=settings.model.response_store_ttl_s,
                )
            app.state.response_store = store
            await chosen.start()
            app.state.ready = True
            yield
        finally:
            app.state.ready = False
            await chosen.stop()
            if store is not None:
                store.close()

    def engine_health() -> dict[str, Any]:
        return chosen.health()

    app = create_service_app(
        "model",
        routers=[router],
        settings=settings,
        lifespan=lifespan,
        health_checks={"engine": engine_health},
        description=f"OpenAI-compatible serving of the K3 architecture (engine: {chosen.name}).",
    )
    app.state.backend = chosen
    app.state.ready = False
    app.state.response_store = None
    install_openai_errors(app)
    classes = parse_admission_classes(
        settings.model.admission_classes, settings.model.max_num_batched_tokens
    )
    _engine_gauges(app, len(classes))
    if hasattr(chosen, "metrics"):
        chosen.metrics = RequestMetrics.create(app.state.metrics.registry)
    app.add_middleware(BodySizeLimit, max_bytes=settings.model.max_body_bytes)
    return app
