"""The orchestrator's Celery app, the one module of its tasks; workers run
`celery -A services.orchestrator.tasks worker -Q orchestrator,rollouts`.

An episode is a job of the shared job model (``shared/jobs.py``): ``orchestrator.run_episode``
is a :class:`~shared.jobs.JobTask` whose message carries the episode id; the task claims the
episode's row, keeps its heartbeat and hands the claimed run to the episode runner, which
commits after every step and writes the outcome. A rollout sample is the same kind of task on
the rollouts queue (its body: :mod:`services.orchestrator.rollouts.tasks`). Nothing here reads
a setting or opens the database at import; the worker migrates once before it takes a task.
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_init

from services.orchestrator.episode.store import TASK_NAME, EpisodeStore, episode_queue
from services.orchestrator.rollouts.service import TASK_NAME as SAMPLE_TASK_NAME
from services.orchestrator.rollouts.service import SampleStore, rollout_queue
from services.orchestrator.rollouts.tasks import sample_job
from services.orchestrator.worker import migrate_once, worker_database
from shared.jobs import JobRun, JobTask
from shared.queue import make_celery

celery = make_celery("orchestrator")

__all__ = ["celery", "enqueue_episode", "enqueue_rollout_sample", "worker_database"]


@celery.task(name="orchestrator.ping")
def ping() -> str:
    """Liveness of this service's worker."""
    return "pong"


@worker_init.connect
def _migrate_before_tasks(sender: Any = None, **_: Any) -> None:
    """Migrate once in the worker's main process before it takes a task; another service's
    worker that imported this module is left alone."""
    if getattr(sender, "app", None) is celery:
        migrate_once()


def episode_job(job: JobRun) -> None:
    """Run (or resume) one claimed episode to its end with the driver stored with it; it
    writes its own outcome."""
    from services.orchestrator.drivers import DRIVERS
    from services.orchestrator.episode.runner import EpisodeRunner
    from services.orchestrator.episode.service import services_from_settings
    from shared.settings import get_settings

    services = services_from_settings(get_settings())
    EpisodeRunner(worker_database(), services, job.id, drivers=DRIVERS).run(job)


run_episode = celery.task(base=JobTask, name=TASK_NAME, job_store=EpisodeStore(worker_database))(
    episode_job
)
run_rollout_sample = celery.task(
    base=JobTask, name=SAMPLE_TASK_NAME, job_store=SampleStore(worker_database)
)(sample_job)


def enqueue_episode(episode_id: str) -> None:
    """Send an episode's task: the episode id is the Celery task id, as for every job."""
    run_episode.apply_async(args=[episode_id], task_id=episode_id, queue=episode_queue())


def enqueue_rollout_sample(sample_id: str) -> None:
    """Send a sample's task to the rollouts queue (``K3STACK_ORCHESTRATOR__ROLLOUT_QUEUE``)."""
    run_rollout_sample.apply_async(args=[sample_id], task_id=sample_id, queue=rollout_queue())
