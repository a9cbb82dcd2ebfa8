"""The jobs routes every service mounts (``GET /jobs``, ``GET /jobs/{id}``, ``POST …/cancel``)
and :func:`wait_for_job`, the client-side poll with exponential backoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from shared.errors import Error
from shared.jobs.model import JobPage, JobStatus, JobView
from shared.jobs.store import JobStore

# --- the routes --------------------------------------------------------------------------------


def _app_store(request: Request) -> JobStore:
    return request.app.state.jobs


JobId = Annotated[str, Path(max_length=64, description="The job's id.")]


def jobs_router(
    store: Callable[[Request], JobStore] = _app_store, *, tags: list[str] | None = None
) -> APIRouter:
    """``GET /jobs``, ``GET /jobs/{id}``, ``POST /jobs/{id}/cancel`` over a service's jobs.

    ``store`` finds the :class:`JobStore` for a request (default ``request.app.state.jobs``).
    """
    router = APIRouter(tags=list(tags or ["jobs"]))
    missing = {404: {"model": Error, "description": "No job with this id"}}

    @router.get("/jobs", response_model=JobPage, operation_id="listJobs")
    def list_jobs(
        request: Request,
        kind: Annotated[str | None, Query(max_length=64)] = None,
        status: Annotated[list[JobStatus] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> JobPage:
        """Jobs, newest first; filter by kind and (repeatable) status."""
        return store(request).list(kind=kind, statuses=status, limit=limit, offset=offset)

    @router.get("/jobs/{job_id}", response_model=JobView, operation_id="getJob", responses=missing)
    def get_job(job_id: JobId, request: Request) -> JobView:
        """A job's status, progress, result or error, read from SQL."""
        return store(request).require(job_id)

    @router.post(
        "/jobs/{job_id}/cancel",
        response_model=JobView,
        operation_id="cancelJob",
        responses={**missing, 409: {"model": Error, "description": "Already finished"}},
    )
    def cancel_job(job_id: JobId, request: Request) -> JobView:
        """Cancel a queued or running job: a queued one never starts, a running one stops at
        its next progress report."""
        return store(request).cancel(job_id)

    return router


# --- waiting ------------------------------------------------------------------------------------


class JobTimeout(TimeoutError):
    """:func:`wait_for_job` gave up; ``job`` is the last state seen."""

    def __init__(self, job: JobView, timeout_s: float) -> None:
        super().__init__(f"job {job.id} still {job.status} after {timeout_s:g} s")
        self.job = job


def wait_for_job(
    fetch: Callable[[], JobView],
    timeout_s: float,
    *,
    initial_s: float = 0.1,
    max_interval_s: float = 5.0,
    factor: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobView:
    """Poll ``fetch`` until the job is finished; the pause doubles from ``initial_s`` up to
    ``max_interval_s``. Raises :class:`JobTimeout` after ``timeout_s``."""
    deadline = clock() + timeout_s
    delay = initial_s
    while True:
        job = fetch()
        if job.finished:
            return job
        remaining = deadline - clock()
        if remaining <= 0:
            raise JobTimeout(job, timeout_s)
        sleep(min(delay, remaining))
        delay = min(delay * factor, max_interval_s)
