"""Sandbox service: isolated machines for agents (issue 3).

Routes in :mod:`services.sandbox.api.routes`, the engine in
:mod:`services.sandbox.lifecycle.manager`, runtimes in :mod:`services.sandbox.runtime`.
State: rows in SQL (this service's migrations), checkpoint bodies in the object store,
sandbox workdirs under ``<data_dir>/sandbox``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

from fastapi import FastAPI

from services.sandbox.api.envd import EnvdDispatch
from services.sandbox.api.envd import router as envd_router
from services.sandbox.api.errors import handle_sandbox_error
from services.sandbox.api.guestcalls import GuestCalls
from services.sandbox.api.hostforward import HostForward
from services.sandbox.api.routes import router
from services.sandbox.lifecycle.errors import SandboxError
from services.sandbox.lifecycle.manager import SandboxManager
from services.sandbox.lifecycle.runtimes import make_runtimes
from services.sandbox.runtime.base import Runtime
from shared.app import create_app as create_service_app
from shared.db import ServiceDatabase
from shared.objectstore import ObjectStore, make_object_store
from shared.settings import Settings, get_settings

MIGRATIONS = Path(__file__).parent / "migrations"
OPENAPI_SPEC = Path(__file__).parent / "openapi.yaml"


def create_app(
    settings: Settings | None = None,
    *,
    runtimes: dict[str, Runtime] | None = None,
    store: ObjectStore | None = None,
    background: bool = True,
    clock: Callable[[], datetime] | None = None,
) -> FastAPI:
    """The service. Tests pass ``settings``, ``runtimes`` or ``store`` to use their own,
    ``background=False`` to drive timeouts, snapshots and GC passes with ``manager.tick()``, and
    ``clock`` (current UTC time) to decide when those are due."""
    settings = settings or get_settings()
    db = ServiceDatabase("sandbox", settings.database_url or "", MIGRATIONS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        manager = SandboxManager(
            settings=settings.sandbox,
            data_dir=Path(settings.data_dir) / "sandbox",
            db=db,
            store=store or make_object_store(settings),
            runtimes=runtimes if runtimes is not None else make_runtimes(settings),
            deployed=settings.mode == "deployed",
            **({"clock": clock} if clock is not None else {}),
        )
        manager.start(background=background)
        app.state.manager = manager
        sb = settings.sandbox
        app.state.guest_calls = GuestCalls(
            sb.guest_call_limit, sb.guest_calls_per_sandbox, sb.guest_calls_per_key,
            sb.guest_streams_limit, sb.guest_streams_per_key, sb.guest_reserve,
        )  # fmt: skip
        app.state.db = db
        try:
            yield
        finally:
            manager.close()
            db.close()

    app = create_service_app(
        "sandbox",
        routers=[router],
        public_routers=[envd_router],  # its own auth: per-sandbox envd access tokens
        lifespan=lifespan,
        health_checks={"database": db.ping},
        settings=settings,
        description="Isolated sandboxes for agents: exec, files, pause/resume, incremental "
        "checkpoints, restore, fork, templates. Lifecycle routes follow E2B's control plane; "
        "E2B's envd data plane (Connect RPC process/filesystem, /files) is served too.",
    )
    app.add_middleware(EnvdDispatch, state=app.state)
    app.add_middleware(HostForward, state=app.state)  # outermost: <port>-<id>.<domain> hosts
    app.add_exception_handler(SandboxError, handle_sandbox_error)
    return app
