"""The FastAPI application factory every service is built with.

``create_app`` gives a service, in one place: ``/health`` (a report), ``/health/live`` (the
process answers) and ``/health/ready`` (503 while a dependency check fails — the service's own,
its broker and its object store — so a load balancer stops routing to it), ``/metrics``
(Prometheus text), request metrics and logging, API-key auth on everything else when enabled
(``/docs``, ``/redoc``, ``/openapi.json`` and ``/metrics`` included unless
``K3STACK_PUBLIC_DOCS`` / ``K3STACK_PUBLIC_METRICS`` open them), the deployed-mode
start-up refusals (:func:`shared.settings.check_deployed`), and the shared
:class:`shared.errors.Error` body for every failure — request-validation failures included, as
400 with a message naming the field (the OpenAPI document says so too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.auth import require_api_key
from shared.errors import APIError, Error
from shared.observability import PROMETHEUS_CONTENT_TYPE, ServiceMetrics, configure_logging
from shared.probes import broker_check, object_store_check
from shared.settings import Settings, check_deployed, get_settings

log = logging.getLogger("k3stack.app")

HealthCheck = Callable[[], Awaitable[dict[str, Any]] | dict[str, Any]]


class Health(BaseModel):
    status: str
    service: str
    version: str
    checks: dict[str, Any] = {}


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


# Seconds a client is told to wait (Retry-After) when the database is down.
STORE_RETRY_AFTER_S = 5


def _error_response(status: int, error_code: str, message: str) -> JSONResponse:
    return JSONResponse(
        Error(code=status, error_code=error_code, message=message).model_dump(), status_code=status
    )


_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def create_app(
    service: str,
    *,
    version: str = "0.1.0",
    routers: Sequence[APIRouter] = (),
    public_routers: Sequence[APIRouter] = (),
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    health_checks: dict[str, HealthCheck] | None = None,
    settings: Settings | None = None,
    description: str = "",
) -> FastAPI:
    """Build a service's app.

    ``routers`` are mounted behind the service's API key; ``public_routers`` do their own auth
    (the tools service's app routes take a per-world token, as the real apps' SDKs send it).
    """
    settings = settings or get_settings()
    configure_logging(settings.log_level, settings.log_format)
    check_deployed(settings, service)
    if settings.mode == "deployed" and not settings.auth_enabled:
        log.error(
            "INSECURE: %s runs in deployed mode with authentication OFF "
            "(K3STACK_ALLOW_INSECURE_NO_AUTH=true); every route is open to anyone who can reach it",
            service,
        )
    metrics = ServiceMetrics(service)
    auth = [Depends(require_api_key(service))]
    # With auth on, the API's description is keyed like the API (it maps every route an
    # attacker could try); the routes below replace FastAPI's open ones.
    keyed_docs = bool(settings.auth_enabled) and not settings.public_docs
    app = FastAPI(
        title=f"k3stack {service}",
        version=version,
        description=description,
        lifespan=lifespan,
        responses={400: {"model": Error, "description": "Bad request"}},
        **({"docs_url": None, "redoc_url": None, "openapi_url": None} if keyed_docs else {}),
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.service = service

    @app.middleware("http")
    async def _observe(request: Request, call_next):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:  # noqa: BLE001 - turned into a 500 below, logged with the route
            log.exception("unhandled error on %s %s", request.method, request.url.path)
            response = _error_response(500, "internal", "internal error; see the service log")
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.observe_request(request.method, path, response.status_code, started)
        return response

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _store_down(request: Request, exc: Exception) -> JSONResponse:
        # A database that went away (or is locked) is the platform's outage, not a bug of the
        # caller's request: 503 and when to try again, never 500 "internal".
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        response = _error_response(
            503, "store_unavailable", "the service's database is unavailable; retry shortly"
        )
        response.headers["Retry-After"] = str(STORE_RETRY_AFTER_S)
        return response

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _error_response(exc.status, exc.error_code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(400, "invalid_request", _describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "error")
        return _error_response(exc.status_code, code, str(exc.detail))

    checks: dict[str, HealthCheck] = {
        **(health_checks or {}),
        "broker": broker_check(settings),
        "object_store": object_store_check(settings),
    }

    keyed = require_api_key(service)

    async def run_checks(request: Request) -> Health:
        """Every check's result; a caller without the service's key (when auth is on) sees only
        each check's up/down: the details name internal hosts and carry error texts."""
        results: dict[str, Any] = {}
        down: set[str] = set()
        for name, check in checks.items():
            try:
                # Checks block on the network: in a thread, so the event loop keeps serving.
                value = await run_in_threadpool(check)
                if hasattr(value, "__await__"):
                    value = await value  # type: ignore[misc]
                results[name] = value
            except Exception as exc:  # noqa: BLE001 - a failing check makes the service degraded
                down.add(name)
                results[name] = {"error": str(exc)}
        try:
            keyed(request)
        except APIError:
            results = {name: "down" if name in down else "up" for name in results}
        return Health(
            status="degraded" if down else "ok", service=service, version=version, checks=results
        )

    @app.get("/health", response_model=Health, tags=["ops"], operation_id="getHealth")
    async def health(request: Request) -> Health:
        return await run_checks(request)

    # Probes (kept out of the OpenAPI documents, which describe the service's API).
    @app.get("/health/live", include_in_schema=False)
    async def liveness() -> dict[str, str]:
        return {"status": "ok", "service": service}

    @app.get("/health/ready", include_in_schema=False)
    async def readiness(request: Request) -> JSONResponse:
        report = await run_checks(request)
        return JSONResponse(report.model_dump(), status_code=200 if report.status == "ok" else 503)

    metrics_auth = [] if settings.public_metrics else auth

    @app.get(
        "/metrics",
        tags=["ops"],
        operation_id="getMetrics",
        response_class=Response,
        dependencies=metrics_auth,
    )
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=PROMETHEUS_CONTENT_TYPE)

    if keyed_docs:
        _keyed_docs(app, auth)
    for router in routers:
        app.include_router(router, dependencies=auth)
    for router in public_routers:
        app.include_router(router)

    _document_errors_as_400(app)
    return app


def _keyed_docs(app: FastAPI, auth: list[Any]) -> None:
    """FastAPI's /openapi.json, /docs and /redoc behind the service's key (a browser must send
    it, e.g. through a proxy that adds the header; K3STACK_PUBLIC_DOCS=true opens them)."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=auth)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")

    @app.get("/redoc", include_in_schema=False, dependencies=auth)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


def _document_errors_as_400(app: FastAPI) -> None:
    """Say in the OpenAPI document what the handlers do: validation errors are 400 + Error."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        for item in schema.get("paths", {}).values():
            for op in item.values():
                responses = op.get("responses", {})
                if "422" in responses:
                    del responses["422"]
                    responses.setdefault(
                        "400",
                        {
                            "description": "Bad request",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Error"}
                                }
                            },
                        },
                    )
        comps = schema.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            comps.pop(name, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
