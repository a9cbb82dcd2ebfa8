"""One setup per task, forked K times: the first sample of a task to start claims the task's
setup row and creates the world and the sandbox; every sample (that one too) then forks both,
so K samples cost one setup plus K cheap forks instead of K setups."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.exc import IntegrityError

from services.orchestrator.episode.platform import Services
from services.orchestrator.rollouts.models import SetupRow
from shared.contracts.orchestrator import TaskSpec
from shared.db import ServiceDatabase
from shared.jobs import TransientJobError, utcnow

#: A setup claimed this long ago and still "creating" is taken over (its worker died).
STALE_SETUP_S = 600.0


@dataclass
class Forked:
    world_id: str | None
    world_token: str | None
    sandbox_id: str | None


def _claim(db: ServiceDatabase, rollout_id: str, index: int, owner: str) -> bool:
    try:
        with db.session() as s:
            s.add(SetupRow(rollout_id=rollout_id, task_index=index, status="creating",
                           owner=owner, claimed_at=utcnow()))  # fmt: skip
        return True
    except IntegrityError:
        with db.session() as s:  # a setup whose creator died is taken over
            row = s.get(SetupRow, (rollout_id, index))
            stale = utcnow() - timedelta(seconds=STALE_SETUP_S)
            if row is not None and row.status == "creating" and row.claimed_at < stale:
                row.owner, row.claimed_at = owner, utcnow()
                return True
        return False


def base_setup(db: ServiceDatabase, svc: Services, rollout_id: str, index: int, task: TaskSpec, owner: str,
               wait_s: float = STALE_SETUP_S) -> SetupRow:  # fmt: skip
    """The task's base world and sandbox, created here once or waited for."""
    if _claim(db, rollout_id, index, owner):
        began = time.monotonic()
        world_id = token = sandbox_id = None
        try:
            if task.scenario:
                w = svc.tools.create_world(task.scenario, task.seed)
                world_id, token = w.id, w.token
            if task.sandbox_template:
                sandbox_id = svc.sandbox.create(
                    task.sandbox_template, metadata={"k3stack_rollout": rollout_id}
                ).sandboxID
        except Exception as exc:
            with db.session() as s:
                row = s.get(SetupRow, (rollout_id, index))
                row.status, row.error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
            raise
        with db.session() as s:
            row = s.get(SetupRow, (rollout_id, index))
            row.status, row.world_id, row.world_token = "ready", world_id, token
            row.sandbox_id, row.setup_s = sandbox_id, time.monotonic() - began
    deadline = time.monotonic() + wait_s
    while True:
        with db.session() as s:
            row = s.get(SetupRow, (rollout_id, index))
            s.expunge(row)
        if row.status == "ready":
            return row
        if row.status == "failed":
            raise RuntimeError(f"task {index}'s setup failed: {row.error}")
        if time.monotonic() > deadline:
            raise TransientJobError(f"task {index}'s setup is still being created")
        time.sleep(0.2)


def fork_setup(svc: Services, base: SetupRow) -> Forked:
    """A sample's own copy of the base: a world fork and a sandbox fork."""
    world_id = token = sandbox_id = None
    if base.world_id:
        w = svc.tools.fork(base.world_id)
        world_id, token = w.id, w.token
    if base.sandbox_id:
        out = svc.sandbox.fork(base.sandbox_id, count=1, memory=False)[0]
        if out.sandbox is None:
            raise RuntimeError(f"sandbox fork failed: {out.error}")
        sandbox_id = out.sandbox.sandboxID
    return Forked(world_id, token, sandbox_id)
