"""Tools service: mock apps in isolated worlds, event streams and scenario checks (issue 4).

Management routes (worlds, clock, events, checks, scenarios) sit behind the service API key;
each app's routes sit behind the per-world token and answer errors in the app's own style.
Apps are discovered by folder (``services/tools/apps/<app>/routes.py``), so adding an app
needs no change here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import inspect
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.tools.db import app_module, load_apps, set_present_tables
from services.tools.worlds.routes import router as worlds_router
from shared.app import _HTTP_CODES, _describe_validation
from shared.app import create_app as create_service_app
from shared.db import ServiceDatabase
from shared.errors import APIError, Error
from shared.objectstore import make_object_store
from shared.settings import get_settings

log = logging.getLogger("k3stack.tools")
MIGRATIONS = Path(__file__).parent / "migrations"
_APP_PATH = re.compile(r"^/(?:worlds/[^/]+/)?(?:upload/)?([a-z][a-z0-9_]*)/")

ErrorStyle = Callable[[int, str], JSONResponse]


def app_routers() -> tuple[list[APIRouter], dict[str, ErrorStyle], dict[type, Any]]:
    """Every app's routers, error styles and exception handlers, found by folder."""
    routers: list[APIRouter] = []
    styles: dict[str, ErrorStyle] = {}
    handlers: dict[type, Any] = {}
    for app in load_apps():
        mod = app_module(app, "routes")
        if mod is None:
            continue
        found = getattr(mod, "routers", None) or [getattr(mod, "router", None)]
        routers.extend(r for r in found if r is not None)
        if callable(getattr(mod, "error_response", None)):
            styles[app] = mod.error_response
        handlers.update(getattr(mod, "exception_handlers", {}) or {})
    return routers, styles, handlers


def _install_error_styles(app: FastAPI, styles: dict[str, ErrorStyle]) -> None:
    """Errors on an app's paths (auth, validation, unknown routes) in that app's style."""

    def style_for(request: Request) -> ErrorStyle | None:
        m = _APP_PATH.match(request.url.path)
        return styles.get(m.group(1)) if m else None

    def default(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse(
            Error(code=status, error_code=code, message=message).model_dump(), status_code=status
        )

    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        style = style_for(request)
        if style is not None:
            return style(exc.status, exc.message)
        return default(exc.status, exc.error_code, exc.message)

    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        message = _describe_validation(exc)
        style = style_for(request)
        return style(400, message) if style else default(400, "invalid_request", message)

    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        style = style_for(request)
        if style is not None:
            return style(exc.status_code, str(exc.detail))
        return default(exc.status_code, _HTTP_CODES.get(exc.status_code, "error"), str(exc.detail))

    app.add_exception_handler(APIError, api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]


def create_app() -> FastAPI:
    settings = get_settings()
    db = ServiceDatabase("tools", settings.database_url or "", MIGRATIONS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        missing = set_present_tables(set(inspect(db.engine).get_table_names()))
        if missing:
            log.warning("tables without a migration, left out of worlds: %s", missing)
        app.state.db = db
        app.state.objects = make_object_store(settings)
        yield
        db.close()

    routers, styles, handlers = app_routers()
    extra: list[APIRouter] = []
    mcp = app_module_safe("services.tools.mcp.routes")
    if mcp is not None and getattr(mcp, "router", None) is not None:
        extra.append(mcp.router)
    app = create_service_app(
        "tools",
        routers=[worlds_router],
        public_routers=[*routers, *extra],
        lifespan=lifespan,
        health_checks={"database": db.ping},
        settings=settings,
        description="Mock Gmail, Slack, Notion and Calendar; worlds; scenarios.",
    )
    _install_error_styles(app, styles)
    for exc_type, handler in handlers.items():
        app.add_exception_handler(exc_type, handler)
    return app


def app_module_safe(name: str):  # type: ignore[no-untyped-def]
    """Import an optional module (e.g. the MCP server) if it exists."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        raise
