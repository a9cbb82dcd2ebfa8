"""Tools service: mock apps and worlds (issue 4). Wired today: worlds recorded in SQL."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field

from services.tools.context import token_digest
from services.tools.models import WorldRow
from shared.app import create_app as create_service_app
from shared.db import ServiceDatabase
from shared.errors import not_found
from shared.settings import get_settings

router = APIRouter(tags=["worlds"])
MIGRATIONS = Path(__file__).parent / "migrations"


class WorldCreate(BaseModel):
    scenario: str = Field("empty", min_length=1, max_length=128)
    seed: int = Field(0, ge=0, le=2**31 - 1)


class World(BaseModel):
    id: str
    scenario: str
    seed: int
    created_at: datetime
    token: str | None = Field(None, description="World token; returned once, at creation.")


@router.post("/worlds", response_model=World, status_code=201, operation_id="createWorld")
def create_world(body: WorldCreate, request: Request) -> World:
    db: ServiceDatabase = request.app.state.db
    now = datetime.now(UTC)
    token = secrets.token_urlsafe(24)
    row = WorldRow(
        id=uuid.uuid4().hex,
        scenario=body.scenario,
        seed=body.seed,
        created_at=now,
        token_sha256=token_digest(token),
        clock=now,
        id_counter=0,
    )
    with db.session() as s:
        s.add(row)
    return World(
        id=row.id, scenario=row.scenario, seed=row.seed, created_at=row.created_at, token=token
    )


@router.get("/worlds/{world_id}", response_model=World, operation_id="getWorld")
def get_world(world_id: str, request: Request) -> World:
    db: ServiceDatabase = request.app.state.db
    with db.session() as s:
        row = s.get(WorldRow, world_id)
        if row is None:
            raise not_found("world", world_id)
        return World(id=row.id, scenario=row.scenario, seed=row.seed, created_at=row.created_at)


def create_app() -> FastAPI:
    settings = get_settings()
    db = ServiceDatabase("tools", settings.database_url or "", MIGRATIONS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        app.state.db = db
        yield
        db.close()

    return create_service_app(
        "tools",
        routers=[router],
        lifespan=lifespan,
        health_checks={"database": db.ping},
        settings=settings,
        description="Mock Gmail, Slack, Notion and Calendar; worlds; scenarios.",
    )
