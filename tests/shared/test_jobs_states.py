"""The job store's transitions under random interleavings (hypothesis, stateful): workers
claiming, reporting, finishing and dying, clients cancelling, the reaper and the clock moving.
Whatever the order, the invariants of the lifecycle hold."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from services.verifier.models import JobRow
from services.verifier.tasks import MIGRATIONS
from shared.db import ServiceDatabase
from shared.errors import APIError
from shared.jobs import FINISHED, JobPolicy, JobStatus, JobStore

POLICY = JobPolicy(heartbeat_s=1, lease_s=10, max_attempts=3)
# Owners on another host: liveness is only ever judged by the lease here.
OWNERS = [f"elsewhere:{n}:x" for n in range(4)]


class JobLifecycle(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory()
        self.db = ServiceDatabase(
            "verifier", f"sqlite:///{Path(self._tmp.name) / 'j.db'}", MIGRATIONS
        )
        self.db.migrate()
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self.store = JobStore(self.db, JobRow, policy=POLICY, clock=lambda: self.now)
        self.finished: dict[str, tuple[str, object]] = {}  # job id -> (status, result) once final
        self.ids: list[str] = []

    def teardown(self) -> None:
        self.db.close()
        self._tmp.cleanup()

    @rule(target=jobs)
    def submit(self) -> str:
        job = self.store.create(kind="k", payload={}, task_name="t")
        self.ids.append(job.id)
        return job.id

    @rule(job=jobs, owner=st.sampled_from(OWNERS))
    def claim(self, job: str, owner: str) -> None:
        before = self.store.require(job)
        claim = self.store.claim(job, owner)
        if claim.started:
            assert before.status is JobStatus.queued or (
                before.status is JobStatus.running
                and before.heartbeat_at < self.now - timedelta(seconds=POLICY.lease_s)
            )
            assert claim.attempt == before.attempts + 1 <= POLICY.max_attempts

    @rule(job=jobs, owner=st.sampled_from(OWNERS), fraction=st.floats(0, 1))
    def progress(self, job: str, owner: str, fraction: float) -> None:
        before = self.store.require(job)
        if self.store.report_progress(job, owner, fraction, "p"):
            assert before.status is JobStatus.running

    @rule(job=jobs, owner=st.sampled_from(OWNERS))
    def succeed(self, job: str, owner: str) -> None:
        before = self.store.require(job)
        if self.store.succeed(job, owner, {"by": owner}, None):
            assert before.status is JobStatus.running

    @rule(job=jobs, owner=st.sampled_from(OWNERS))
    def fail(self, job: str, owner: str) -> None:
        before = self.store.require(job)
        if self.store.fail(job, owner, "boom", "it broke"):
            assert before.status is JobStatus.running

    @rule(job=jobs)
    def cancel(self, job: str) -> None:
        before = self.store.require(job)
        try:
            after = self.store.cancel(job)
        except APIError as exc:
            assert exc.status == 409 and before.status in FINISHED
        else:
            assert before.status not in FINISHED and after.status is JobStatus.cancelled

    @rule(seconds=st.sampled_from([0.5, 3, 11]))
    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def reap(self) -> None:
        for job in self.store.expire_lost():
            assert job.status is JobStatus.queued and job.attempts < POLICY.max_attempts

    @invariant()
    def lifecycle_holds(self) -> None:
        for job_id in self.ids:
            job = self.store.require(job_id)
            assert 0 <= job.attempts <= POLICY.max_attempts
            assert 0.0 <= job.progress.fraction <= 1.0
            assert (job.status is JobStatus.failed) == (job.error is not None)
            assert (job.status in FINISHED) == (job.finished_at is not None)
            if job.status is JobStatus.running:
                assert job.started_at is not None and job.attempts >= 1
            if job.status is JobStatus.succeeded:
                assert job.result is not None
            # A finished job never changes again.
            final = (job.status.value, job.result)
            if job_id in self.finished:
                assert self.finished[job_id] == final, (job_id, self.finished[job_id], final)
            elif job.status in FINISHED:
                self.finished[job_id] = final


JobLifecycle.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_job_lifecycle = JobLifecycle.TestCase
