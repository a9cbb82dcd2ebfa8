"""The client side of ``/jobs``: a mixin for any service client whose service mounts
:func:`shared.jobs.jobs_router`.

The host class provides ``request(method, path, **kw) -> httpx.Response`` that raises on a
non-2xx answer (``shared.clients.ServiceClient`` does); the mixin adds typed job calls and
:meth:`JobsClient.wait_job`, which polls with exponential backoff until the job finishes::

    class VerifierClient(ServiceClient, JobsClient): ...
    job = client.wait_job(client.create_job(...).id, timeout_s=120)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from shared.jobs import JobPage, JobStatus, JobTimeout, JobView, wait_for_job


def _list_params(
    kind: str | None, status: list[JobStatus] | JobStatus | None, limit: int, offset: int
) -> list[tuple[str, Any]]:
    params: list[tuple[str, Any]] = [("limit", limit), ("offset", offset)]
    if kind is not None:
        params.append(("kind", kind))
    statuses = [status] if isinstance(status, str) else list(status or [])
    params += [("status", str(s)) for s in statuses]
    return params


def _job_path(job_id: str, suffix: str = "") -> str:
    return f"/jobs/{quote(job_id, safe='')}{suffix}"


class JobsClient:
    """Typed ``/jobs`` calls for a synchronous service client; the host class provides
    ``request`` (``class VerifierClient(ServiceClient, JobsClient)``)."""

    request: Callable[..., Any]

    def get_job(self, job_id: str) -> JobView:
        return JobView.model_validate(self.request("GET", _job_path(job_id)).json())

    def list_jobs(
        self,
        *,
        kind: str | None = None,
        status: list[JobStatus] | JobStatus | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage:
        params = _list_params(kind, status, limit, offset)
        return JobPage.model_validate(self.request("GET", "/jobs", params=params).json())

    def cancel_job(self, job_id: str) -> JobView:
        return JobView.model_validate(self.request("POST", _job_path(job_id, "/cancel")).json())

    def wait_job(
        self,
        job_id: str,
        timeout_s: float = 600.0,
        *,
        initial_s: float = 0.1,
        max_interval_s: float = 5.0,
    ) -> JobView:
        """Poll until the job is finished (raises :class:`shared.jobs.JobTimeout`)."""
        return wait_for_job(
            lambda: self.get_job(job_id),
            timeout_s,
            initial_s=initial_s,
            max_interval_s=max_interval_s,
        )


class AsyncJobsClient:
    """Typed ``/jobs`` calls for an asynchronous service client; the host provides an async
    ``request``."""

    request: Callable[..., Awaitable[Any]]

    async def get_job(self, job_id: str) -> JobView:
        return JobView.model_validate((await self.request("GET", _job_path(job_id))).json())

    async def list_jobs(
        self,
        *,
        kind: str | None = None,
        status: list[JobStatus] | JobStatus | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage:
        params = _list_params(kind, status, limit, offset)
        return JobPage.model_validate((await self.request("GET", "/jobs", params=params)).json())

    async def cancel_job(self, job_id: str) -> JobView:
        resp = await self.request("POST", _job_path(job_id, "/cancel"))
        return JobView.model_validate(resp.json())

    async def wait_job(
        self,
        job_id: str,
        timeout_s: float = 600.0,
        *,
        initial_s: float = 0.1,
        max_interval_s: float = 5.0,
    ) -> JobView:
        """Poll until the job is finished, sleeping with exponential backoff."""
        deadline = time.monotonic() + timeout_s
        delay = initial_s
        while True:
            job = await self.get_job(job_id)
            if job.finished:
                return job
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise JobTimeout(job, timeout_s)
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, max_interval_s)
