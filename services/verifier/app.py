"""Verifier service: scores what agents produced.

Wired today: verification jobs recorded in SQL and run by Celery workers (kind ``echo``);
the kernel/web verifiers and judges plug in as further kinds.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from celery.result import AsyncResult
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field

from services.verifier.models import JobRow
from shared.app import create_app as create_service_app
from shared.db import ServiceDatabase
from shared.errors import not_found
from shared.settings import get_settings

router = APIRouter(tags=["jobs"])
MIGRATIONS = Path(__file__).parent / "migrations"


class JobCreate(BaseModel):
    kind: Literal["echo"] = Field(description="Job kind; `echo` round-trips through a worker.")
    payload: dict[str, Any] = Field(default_factory=dict, description="Kind-specific input.")


class Job(BaseModel):
    id: str
    kind: str
    status: Literal["queued", "running", "succeeded", "failed"]
    created_at: datetime
    result: dict[str, Any] | None = None
    error: str | None = None


_STATES = {"STARTED": "running", "RETRY": "running", "SUCCESS": "succeeded", "FAILURE": "failed"}


@router.post("/jobs", response_model=Job, status_code=202, operation_id="createJob")
def create_job(body: JobCreate, request: Request) -> Job:
    """Record a verification job and queue it for a worker; poll ``GET /jobs/{id}``."""
    from services.verifier.tasks import echo

    db: ServiceDatabase = request.app.state.db
    job_id = uuid.uuid4().hex
    now = datetime.now(UTC)
    with db.session() as s:
        s.add(JobRow(id=job_id, kind=body.kind, created_at=now, payload=body.payload))
    echo.apply_async(args=[body.payload], task_id=job_id)
    return Job(id=job_id, kind=body.kind, status="queued", created_at=now)


@router.get("/jobs/{job_id}", response_model=Job, operation_id="getJob")
def get_job(job_id: str, request: Request) -> Job:
    from services.verifier.tasks import celery

    db: ServiceDatabase = request.app.state.db
    with db.session() as s:
        row = s.get(JobRow, job_id)
        if row is None:
            raise not_found("job", job_id)
        kind, created = row.kind, row.created_at
    res = AsyncResult(job_id, app=celery)
    status = _STATES.get(res.state, "queued")
    return Job(
        id=job_id,
        kind=kind,
        status=status,  # type: ignore[arg-type]
        created_at=created,
        result=res.result if status == "succeeded" else None,
        error=str(res.result) if status == "failed" else None,
    )


def create_app() -> FastAPI:
    settings = get_settings()
    db = ServiceDatabase("verifier", settings.database_url or "", MIGRATIONS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        app.state.db = db
        yield
        db.close()

    return create_service_app(
        "verifier",
        routers=[router],
        lifespan=lifespan,
        health_checks={"database": db.ping},
        settings=settings,
        description="Kernel and web-app verifiers, rule and model judges.",
    )
