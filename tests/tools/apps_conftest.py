"""Helpers for the Slack / Notion / Calendar / MCP tests (imported explicitly, not a conftest).

One tools app over one SQLite file serves a whole test module; each test gets a fresh world
(worlds are isolated, so that is a clean slate) and seeds it through the apps' ``actions``::

    from tests.tools.apps_conftest import live_server, make_world, tools_app, world_ctx
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from services.tools.context import WorldContext, open_world, token_digest
from services.tools.db import tools_database
from services.tools.models import WorldRow
from shared.app import create_app as create_service_app
from shared.settings import Settings

# The admin key of the service servers here (management routes want one in every mode).
ADMIN_KEY = "tools-admin-key-for-the-tests"
ADMIN = {"X-API-Key": ADMIN_KEY}
CLOCK = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday, 09:00 UTC


def app_routers() -> list[APIRouter]:
    from services.tools.apps.calendar.routes import router as calendar
    from services.tools.apps.notion.routes import router as notion
    from services.tools.apps.slack.routes import router as slack
    from services.tools.mcp.routes import router as mcp

    return [slack, notion, calendar, mcp]


@contextmanager
def tools_app(tmp: Path, routers: Sequence[APIRouter] | None = None) -> Iterator[FastAPI]:
    """The tools service's app factory with the app routers mounted, migrated and started."""
    db = tools_database(f"sqlite:///{tmp / 'tools.db'}")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        app.state.db = db
        yield
        db.close()

    app = create_service_app(
        "tools",
        public_routers=list(routers if routers is not None else app_routers()),
        lifespan=lifespan,
        settings=Settings(),
    )
    with TestClient(app):  # runs the lifespan
        yield app


@dataclass
class World:
    id: str
    token: str
    client: TestClient

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def make_world(app: FastAPI, seed: int = 0, clock: datetime = CLOCK) -> World:
    """Insert a world row directly (the worlds API is the core's; these tests need only a row)."""
    token = secrets.token_urlsafe(24)
    wid = uuid.uuid4().hex
    with app.state.db.session() as s:
        s.add(
            WorldRow(
                id=wid,
                scenario="test",
                seed=seed,
                created_at=clock,
                token_sha256=token_digest(token),
                clock=clock,
                id_counter=0,
            )
        )
    client = TestClient(app, headers={"Authorization": f"Bearer {token}"})
    return World(id=wid, token=token, client=client)


@contextmanager
def world_ctx(app: FastAPI, world_id: str, actor: str = "scenario") -> Iterator[WorldContext]:
    """A committed context over a world, for seeding through the apps' actions."""
    with app.state.db.session() as s, open_world(s, world_id, actor=actor) as ctx:
        yield ctx


def set_clock(app: FastAPI, world_id: str, when: datetime) -> None:
    with app.state.db.session() as s:
        s.get(WorldRow, world_id).clock = when


@contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    from tests.helpers.servers import free_port

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            httpx.get(url + "/health", timeout=1)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def service_server(tmp: Path) -> Iterator[tuple[FastAPI, str]]:
    """The real tools service (``services.tools.app.create_app``: worlds API, every app, MCP)
    on a free port, for the official-SDK contract tests; yields ``(app, base_url)``."""
    from services.tools.app import create_app
    from shared.settings import get_settings

    # the app keeps its settings from here on: the environment is put back before yielding
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3STACK_DATA_DIR", str(tmp))
        mp.delenv("K3STACK_DATABASE_URL", raising=False)
        mp.setenv("K3STACK_AUTH_ENABLED", "false")
        mp.setenv("K3STACK_TOOLS__API_KEY", ADMIN_KEY)
        get_settings.cache_clear()
        app = create_app()
    get_settings.cache_clear()
    with TestClient(app):  # runs the lifespan: migrations, app.state.db
        with live_server(app) as url:
            yield app, url


def create_world(base_url: str, seed: int = 0) -> tuple[str, str]:
    """``POST /worlds`` on the real service: (world id, world token)."""
    body = httpx.post(
        f"{base_url}/worlds",
        json={"scenario": "empty", "seed": seed},
        headers=ADMIN,
        timeout=60,  # a new world runs every app's set-up; two busy cores can take seconds
    ).json()
    return body["id"], body["token"]


def json_bodies(keys: Sequence[str]):  # type: ignore[no-untyped-def]
    """A hypothesis strategy: JSON objects over ``keys`` with values of any JSON type (and the
    odd plausible one), for "bad input is the app's own error, never a 5xx" fuzzing."""
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
        st.sampled_from(["general", "2026-03-02T10:00:00Z", "2026-03-02", "primary", "title"]),
    )
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from([*keys, "name", "id"]), inner, max_size=3),
        ),
        max_leaves=6,
    )
    return st.dictionaries(st.sampled_from(list(keys)), values, max_size=5)
