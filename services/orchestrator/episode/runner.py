"""Running one episode on a worker: claim it, pick its driver, drive it, release its sandbox
and world.

An episode is a job of the shared job model (``shared/jobs.py``): the claim, the heartbeat
thread, attempts, cancellation and the reaper's re-queue / ``worker_lost`` are that model's.
The driver was picked at submit (``orchestrator_episodes.driver``; an episode stored before the
column gets the one its harness kind names, at its first start) and is looked up in the
:class:`~.driver.DriverRegistry` the runner is given: the core's own holds only the white-box
loop; the composition root (``services/orchestrator/drivers.py``) adds the installed agent
and the rollout sample. Each driver commits after every tick through the shared
:class:`~.recorder.EpisodeRecorder`; a worker that dies stops its heartbeat, the reaper puts
the episode back on the queue, and the next worker resumes it from its last committed tick.
"""

from __future__ import annotations

import logging

from sqlalchemy import update

from services.orchestrator.episode.driver import DriverContext, DriverRegistry, UnknownDriver, drive
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.platform import Services
from services.orchestrator.episode.protocols import Policy
from services.orchestrator.episode.recorder import SQLJournal, stored_harness
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.store import (
    QUEUE,
    TASK_NAME,
    TERMINAL,
    EpisodeStore,
    episode_queue,
    now_utc,
)
from services.orchestrator.episode.whitebox import ContextTooSmall, LoopDriver
from services.orchestrator.harness.config import load_harness
from shared.db import ServiceDatabase
from shared.jobs import JobCancelled, JobRun, heartbeats, new_owner

__all__ = [
    "QUEUE", "TASK_NAME", "TERMINAL", "EpisodeRunner", "EpisodeStore", "SQLJournal", "Services",
    "core_drivers", "episode_queue", "now_utc", "release_resources",
]  # fmt: skip

log = logging.getLogger("k3stack.orchestrator")


def core_drivers() -> DriverRegistry:
    """The core's own registry: the white-box loop only (its extensions register elsewhere)."""
    return DriverRegistry().register(LoopDriver.name, LoopDriver, ("white-box",))


class EpisodeRunner:
    def __init__(
        self,
        db: ServiceDatabase,
        services: Services,
        episode_id: str,
        policy: Policy | None = None,
        drivers: DriverRegistry | None = None,
    ) -> None:
        self.db = db
        self.svc = services
        self.id = episode_id
        self.store = EpisodeStore(db, services.settings)
        self.owner = ""
        self.policy_override = policy
        self.drivers = drivers or core_drivers()

    def run(self, job: JobRun | None = None) -> None:
        """Run the episode as ``job`` (a claimed run: the Celery task's), or claim it here and
        keep its heartbeat (an in-process run) — the same claim either way."""
        if job is not None:
            self._run(job)
            return
        owner = new_owner()
        claim = self.store.claim(self.id, owner)
        if not claim.started:
            log.info("episode %s not started: %s", self.id, claim.reason)
            return
        job = JobRun(self.store, self.id, owner, claim.payload, claim.attempt)
        with heartbeats(job, self.store.policy.heartbeat_s):
            self._run(job)

    def _run(self, job: JobRun) -> None:
        self.owner = job.owner
        try:
            factory = self.drivers.get(self.driver_name())
            drive(factory(DriverContext(self.db, self.svc, job, self.policy_override)))
        except JobCancelled:
            log.info("episode %s stopped: cancelled or taken over", self.id)
        except ContextTooSmall as exc:
            log.warning("episode %s: %s", self.id, exc)
            self.store.fail(self.id, self.owner, "context_too_small", str(exc))
        except UnknownDriver as exc:
            self.store.fail(self.id, self.owner, "unknown_driver", str(exc))
        except Exception as exc:  # noqa: BLE001 - an episode that cannot go on is marked failed
            log.exception("episode %s failed", self.id)
            self.store.fail(self.id, self.owner, type(exc).__name__, str(exc)[:2000])
        finally:
            self.release()

    def driver_name(self) -> str:
        """The driver stored with the episode; one stored before drivers were (no name) gets
        the one its harness kind names, stored now, so every later start runs the same."""
        with self.db.session() as s:
            row = s.get(EpisodeRow, self.id)
            name, request = row.driver, row.request
        if name:
            return name
        harness = stored_harness(self.db, self.id)
        if harness is None:
            body = EpisodeCreate.model_validate(request)
            harness = load_harness(body.harness, self.svc.settings.data_dir)
        name = self.drivers.for_harness(harness)
        with self.db.session() as s:
            s.get(EpisodeRow, self.id).driver = name
        return name

    def release(self) -> None:
        release_resources(self.db, self.svc, self.id)


def release_resources(db: ServiceDatabase, svc: Services, episode_id: str) -> None:
    """Kill a finished episode's sandbox and delete its world (unless kept). Idempotent."""
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        if row is None or row.status not in TERMINAL or row.resources_released:
            return
        keep_world = bool((row.request or {}).get("keep_world"))
        sandbox_id, world_id = row.sandbox_id, row.world_id
    from shared.clients import ServiceError

    try:
        if sandbox_id:
            svc.sandbox.kill(sandbox_id)
    except ServiceError as exc:
        if exc.status != 404:
            log.warning("episode %s: sandbox %s not released: %s", episode_id, sandbox_id, exc)
            return
    try:
        if world_id and not keep_world:
            svc.tools.delete_world(world_id)
    except ServiceError as exc:
        if exc.status != 404:
            log.warning("episode %s: world %s not released: %s", episode_id, world_id, exc)
            return
    with db.session() as s:
        s.execute(
            update(EpisodeRow).where(EpisodeRow.id == episode_id).values(resources_released=True)
        )
