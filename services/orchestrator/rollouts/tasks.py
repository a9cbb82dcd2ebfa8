"""The rollout sample task's body: one Celery task per sample on the rollouts queue
(``K3STACK_ORCHESTRATOR__ROLLOUT_QUEUE``). It is a :class:`~shared.jobs.JobTask` (``acks_late``,
``reject_on_worker_lost``, claim + heartbeat), and on Redis the broker's visibility timeout
(3600 s, ``shared/queue.py``) is above the longest sample's run; a worker killed outright is
caught by the reaper, which re-queues the sample from its last committed tick."""

from __future__ import annotations

from services.orchestrator.episode.driver import DriverContext
from services.orchestrator.episode.platform import Services
from services.orchestrator.rollouts.sample import SampleDriver, SampleOutcome
from services.orchestrator.rollouts.service import SampleStore
from shared.db import ServiceDatabase
from shared.jobs import JobRun


def sample_job(job: JobRun) -> SampleOutcome:
    """The body of the sample task (registered on the orchestrator's one Celery app,
    :mod:`services.orchestrator.tasks`)."""
    from services.orchestrator.episode.service import services_from_settings
    from services.orchestrator.worker import worker_database
    from shared.settings import get_settings

    services = services_from_settings(get_settings())
    return SampleDriver(DriverContext(worker_database(), services, job)).run()


def run_inline(db: ServiceDatabase, services: Services, sample_id: str) -> None:
    """Claim and run one sample in this process (tests, ``k3stack rollout --inline``), exactly
    as the task does: claim, heartbeats, body, outcome."""
    from shared.jobs import JobCancelled, JobFailed, heartbeats, new_owner

    store = SampleStore(db, services.settings)
    owner = new_owner()
    claim = store.claim(sample_id, owner)
    if not claim.started:
        return
    run = JobRun(store, sample_id, owner, claim.payload, claim.attempt)
    with heartbeats(run, store.policy.heartbeat_s):
        try:
            result = SampleDriver(DriverContext(db, services, run)).run()
        except JobCancelled:
            return
        except JobFailed as exc:  # a named outcome (episode/stop.py): its code, as the task's
            store.fail(sample_id, owner, exc.code, exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - recorded on the row
            store.fail(sample_id, owner, "task_error", f"{type(exc).__name__}: {exc}")
            return
        store.succeed(sample_id, owner, result, None)
