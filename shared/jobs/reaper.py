"""The reaper: re-queues (or fails, past the attempts limit) running jobs whose heartbeat is
older than the lease, from a background thread in each service.
"""

from __future__ import annotations

import threading

from celery import Celery

from shared.jobs.enqueue import enqueue_again
from shared.jobs.model import JobView, log
from shared.jobs.store import JobStore


def reap(store: JobStore, app: Celery) -> list[JobView]:
    """One pass of the recovery rule: re-queue (and re-send) or fail jobs whose worker died."""
    requeued = store.expire_lost()
    for job in requeued:
        log.warning("job %s lost its worker; re-queued (attempt %d)", job.id, job.attempts)
        enqueue_again(store, app, job)
    return requeued


class JobReaper:
    """Runs :func:`reap` every ``interval_s`` in a daemon thread (a service's lifespan).

    A service whose recovery does more than the shared rule (the orchestrator also releases a
    finished episode's world and sandbox) overrides :meth:`reap_once`; the thread, its interval
    and its stop stay this class's.
    """

    def __init__(self, store: JobStore, app: Celery, interval_s: float) -> None:
        self.store, self.app, self.interval_s = store, app, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> JobReaper:
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="job-reaper", daemon=True)
            self._thread.start()
        return self

    def reap_once(self) -> object:
        """One recovery pass."""
        return reap(self.store, self.app)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.reap_once()
            except Exception:  # noqa: BLE001 - a database hiccup must not end the loop
                log.exception("job reaper pass failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
