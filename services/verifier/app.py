"""Verifier service: scores what agents produced.

Verification jobs on the shared job model (``shared/jobs.py``: rows in ``verifier_jobs``, run
by Celery workers, ``GET /jobs``, ``GET /jobs/{id}``, ``POST /jobs/{id}/cancel``): ``echo``
here, and ``kernel``, ``submission``, ``world`` and ``judge`` through ``services/verifier/api.py``
(one Celery queue per kind). ``docs/verifier.md`` describes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field, ValidationError

from services.verifier.api import router as verify_router
from services.verifier.kernel.verify import MAX_CANDIDATE_BYTES
from services.verifier.models import JobRow
from services.verifier.tasks import MIGRATIONS, EchoInput, register_tasks
from services.verifier.uploads import BodyCap
from services.verifier.web.spec import MAX_APP_BYTES
from shared.app import create_app as create_service_app
from shared.db import ServiceDatabase
from shared.errors import Error, bad_request
from shared.jobs import JobReaper, JobStore, JobView, jobs_router, submit
from shared.queue import make_celery
from shared.settings import get_settings

router = APIRouter(tags=["jobs"])

# JSON bodies the largest valid upload fits in: base64 (4/3) or escaped text, plus the rest.
BODY_CAPS = {
    "/verify/web": (MAX_APP_BYTES * 4 // 3 + (1 << 20), "files + binary_files"),
    "/verify/kernel": (MAX_CANDIDATE_BYTES * 2 + (1 << 20), "files"),
}


class JobCreate(BaseModel):
    kind: Literal["echo"] = Field(description="Job kind; `echo` round-trips through a worker.")
    payload: dict[str, Any] = Field(default_factory=dict, description="Kind-specific input.")


@router.post(
    "/jobs",
    response_model=JobView,
    status_code=202,
    operation_id="createJob",
    responses={503: {"model": Error, "description": "The queue could not take the job"}},
)
def create_job(body: JobCreate, request: Request) -> JobView:
    """Record a verification job and queue it for a worker; poll ``GET /jobs/{id}``."""
    try:
        EchoInput.model_validate(body.payload)
    except ValidationError as exc:
        raise bad_request(f"invalid echo payload: {exc.errors()[0]['msg']}") from exc
    tasks = request.app.state.tasks
    return submit(request.app.state.jobs, tasks.echo, kind=body.kind, payload=body.payload)


def create_app() -> FastAPI:
    settings = get_settings()
    db = ServiceDatabase("verifier", settings.database_url or "", MIGRATIONS)
    celery = make_celery("verifier", settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        app.state.db = db
        app.state.celery = celery
        app.state.jobs = JobStore(db, JobRow)
        app.state.tasks = register_tasks(celery, app.state.jobs)
        reaper = JobReaper(app.state.jobs, celery, settings.job_reaper_interval_s).start()
        yield
        reaper.stop()
        db.close()

    app = create_service_app(
        "verifier",
        routers=[router, verify_router, jobs_router()],
        lifespan=lifespan,
        health_checks={"database": db.ping},
        settings=settings,
        description="Kernel and web-app verifiers, rule and model judges.",
    )
    app.add_middleware(BodyCap, caps=BODY_CAPS, default=BODY_CAPS["/verify/web"])
    return app
