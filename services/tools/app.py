"""Tools service: mock apps in isolated worlds, event streams and scenario checks (issue 4).

Management routes (worlds, clock, events, checks, scenarios) sit behind the service API key;
each app's routes sit behind the per-world token and answer errors in the app's own style.
Apps are discovered by folder (``services/tools/apps/<app>/routes.py``), so adding an app
needs no change here.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import inspect
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.tools.apps.base import ErrorStyle
from services.tools.bounds import BodyBounds
from services.tools.db import set_present_tables, tools_apps, tools_database
from services.tools.mcp.routes import router as mcp_router
from services.tools.worlds.routes import router as worlds_router
from shared.app import _HTTP_CODES, _describe_validation
from shared.app import create_app as create_service_app
from shared.auth import service_key
from shared.db import ServiceDatabase
from shared.errors import APIError, Error
from shared.objectstore import make_object_store
from shared.settings import get_settings

log = logging.getLogger("k3stack.tools")
_APP_PATH = re.compile(r"^/(?:worlds/[^/]+/)?(?:upload/)?([a-z][a-z0-9_]*)/")

_HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def app_routers() -> tuple[
    list[APIRouter], dict[str, ErrorStyle], dict[type, Any], dict[str, type[BaseModel]]
]:
    """Every app's routers, error styles, exception handlers and error-body models (for the
    OpenAPI document), from each app's declaration."""
    routers: list[APIRouter] = []
    styles: dict[str, ErrorStyle] = {}
    handlers: dict[type, Any] = {}
    models: dict[str, type[BaseModel]] = {}
    for app in tools_apps():
        routers.extend(app.routers)
        if app.error_response is not None:
            styles[app.name] = app.error_response
        handlers.update(app.exception_handlers)
        if app.error_model is not None:
            models[app.name] = app.error_model
    return routers, styles, handlers, models


class JsonRpcErrorObject(BaseModel):
    code: int
    message: str


class JsonRpcError(BaseModel):
    """What the MCP endpoint answers a malformed or unknown request."""

    jsonrpc: str
    id: Any = None
    error: JsonRpcErrorObject


DEFAULT_400 = "Bad request"  # the description shared.app gives every route's 400


def _document_errors(app: FastAPI, models: dict[str, type[BaseModel]]) -> None:
    """Document every route's real error bodies: 4XX in the app's own shape (Google, Slack,
    Notion) on its paths, JSON-RPC (or the platform's) on MCP, the platform's ``Error``
    elsewhere; FastAPI's 422 goes (validation failures answer 400 in those shapes). A route
    that declares a 4xx of its own (``responses=rejects(...)``) keeps it: the rejections of
    schema-valid input the real API makes, which the fuzz test holds each route to."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = base()
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in [*models.values(), Error, JsonRpcError]:
            schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(schema.pop("$defs", {}))
            schemas[model.__name__] = schema
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)

        def ref(model: type[BaseModel]) -> dict[str, Any]:
            return {"$ref": f"#/components/schemas/{model.__name__}"}

        for path, item in doc.get("paths", {}).items():
            m = _APP_PATH.match(path + "/")
            name = m.group(1) if m else None
            if name == "mcp":
                schema: dict[str, Any] = {"anyOf": [ref(JsonRpcError), ref(Error)]}
                label = "JSON-RPC error (or the platform's, for auth)"
            elif name in models:
                schema, label = ref(models[name]), f"{name} error, in {name}'s own shape"
            else:
                schema, label = ref(Error), "error"
            for op in item.values():
                responses = op.setdefault("responses", {})
                own = {
                    code: r["description"]
                    for code, r in responses.items()
                    if code.startswith("4")
                    and code != "422"
                    and r.get("description") not in (None, DEFAULT_400)
                }
                for code in [c for c in responses if c.startswith("4")]:
                    del responses[code]
                for code, description in own.items():
                    # A route's own 4xx: schema-valid input the real API still rejects (a
                    # recipient missing from a raw message, a stale page token, ...).
                    responses[code] = {
                        "description": description,
                        "content": {"application/json": {"schema": copy.deepcopy(schema)}},
                    }
                responses["4XX"] = {
                    "description": label,
                    "content": {"application/json": {"schema": schema}},
                }
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def allowed_methods(app: FastAPI, path: str) -> set[str]:
    """The methods the OpenAPI document gives ``path``: those of its most literal matching
    template (``/messages/send`` before ``/messages/{id}``, as OpenAPI matches paths); empty
    when no documented path matches (probes, unknown URLs: left to the routes)."""
    table = getattr(app.state, "documented_methods", None)
    if table is None:
        table = []
        for template, item in app.openapi().get("paths", {}).items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
            methods = {m.upper() for m in item if m in _HTTP_METHODS}
            table.append((template.count("{"), re.compile(f"^{pattern}$"), methods))
        app.state.documented_methods = table
    matches = [(params, methods) for params, regex, methods in table if regex.match(path)]
    if not matches:
        return set()
    fewest = min(params for params, _ in matches)
    return set().union(*(methods for params, methods in matches if params == fewest))


def _default_error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(
        Error(code=status, error_code=code, message=message).model_dump(), status_code=status
    )


def _refuser(styles: dict[str, ErrorStyle]) -> Callable[[str, int, str], JSONResponse]:
    """A refusal of a request to ``path`` in its app's error style, with ``status`` kept even
    where the style would answer otherwise (Slack answers its errors with HTTP 200)."""

    def refuse(path: str, status: int, message: str) -> JSONResponse:
        m = _APP_PATH.match(path)
        style = styles.get(m.group(1)) if m else None
        if style is None:
            return _default_error(status, _HTTP_CODES.get(status, "error"), message)
        resp = style(status, message)
        resp.status_code = status
        return resp

    return refuse


def _install_error_styles(app: FastAPI, styles: dict[str, ErrorStyle]) -> None:
    """Errors on an app's paths (auth, validation, unknown routes) in that app's style."""

    def style_for(request: Request) -> ErrorStyle | None:
        m = _APP_PATH.match(request.url.path)
        return styles.get(m.group(1)) if m else None

    default = _default_error

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
            resp = style(exc.status_code, str(exc.detail))
        else:
            resp = default(
                exc.status_code, _HTTP_CODES.get(exc.status_code, "error"), str(exc.detail)
            )
        if exc.status_code == 405:
            # An unsupported method (TRACE, PUT on a POST route, ...) is a 405 naming the
            # methods the path takes, whatever status the app's own style would use.
            resp.status_code = 405
        for key, value in (exc.headers or {}).items():
            resp.headers[key] = value
        return resp

    app.add_exception_handler(APIError, api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]

    @app.middleware("http")
    async def method_not_allowed(request: Request, call_next):  # type: ignore[no-untyped-def]
        """405 with the path's full ``Allow`` for a method no route of the path takes.

        Starlette's own 405 names the methods of the first route whose path matches (``GET``
        alone on a path with ``GET`` and ``DELETE`` routes), and Notion's catch-all route
        (``invalid_request_url``, any method) would take an undeclared method first."""
        allowed = allowed_methods(app, request.url.path)
        if allowed and request.method not in allowed:
            style = style_for(request)
            message = "Method Not Allowed"
            resp = style(405, message) if style else default(405, "method_not_allowed", message)
            resp.status_code = 405
            resp.headers["Allow"] = ", ".join(sorted(allowed))
            return resp
        return await call_next(request)


def ping(db: ServiceDatabase) -> dict[str, str]:
    """``/health``: one ``SELECT 1``; no migration context (the schema is checked at start)."""
    from sqlalchemy import text

    with db.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    return {"dialect": db.engine.dialect.name}


def create_app() -> FastAPI:
    settings = get_settings()
    db = tools_database(settings.database_url or "")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        missing = set_present_tables(set(inspect(db.engine).get_table_names()))
        if missing:
            log.warning("tables without a migration, left out of worlds: %s", missing)
        app.state.db = db
        app.state.objects = make_object_store(settings)
        service_key(settings, "tools")  # embedded mode: the admin key exists once we serve
        yield
        db.close()

    routers, styles, handlers, error_models = app_routers()
    app = create_service_app(
        "tools",
        routers=[worlds_router],
        public_routers=[*routers, mcp_router],
        lifespan=lifespan,
        health_checks={"database": lambda: ping(db)},
        settings=settings,
        description="Mock Gmail, Slack, Notion and Calendar; worlds; scenarios.",
    )
    _install_error_styles(app, styles)
    app.add_middleware(
        BodyBounds,
        max_bytes=settings.tools.max_body_bytes,
        max_depth=settings.tools.max_json_depth,
        refuse=_refuser(styles),
    )
    _document_errors(app, error_models)
    for exc_type, handler in handlers.items():
        app.add_exception_handler(exc_type, handler)
    return app
