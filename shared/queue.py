"""Celery app factory: one app per service, configured from settings when first used.

:func:`make_celery` has no side effect: it reads no settings, creates no directory and touches
no kombu class. The configuration (:func:`celery_config`) is a promise Celery evaluates the
first time the app needs it — sending a task, starting a worker — so a module can build its
app at import (``celery -A services.<name>.tasks`` finds it) and tests can still change the
environment first.

Embedded mode (default) uses kombu's SQLAlchemy transport on a SQLite file under the data dir
(through :class:`EmbeddedTransport`) and a SQLAlchemy result backend, so a laptop needs no
broker server; deployed mode points ``K3STACK_BROKER_URL`` / ``K3STACK_RESULT_BACKEND`` at
Redis. JSON only. Each service's tasks live in ``services/<name>/tasks.py`` and go to the
service's queue (``K3STACK_<SERVICE>__QUEUE``, default the service's name), so ``k3stack up``
can start one worker per service with ``-Q <queue>``. ``K3STACK_CELERY_EAGER=1`` runs tasks
in the caller (unit tests).

Retry policies are explicit: publishing retries a few times within about a second and then
raises (a job whose enqueue fails is marked failed, see :mod:`shared.jobs`); a task's own
retries are its own policy (``shared.jobs.JobTask``: bounded, with exponential backoff).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery
from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport

from shared.settings import Settings, check_deployed, get_settings

EMBEDDED_POLLING_INTERVAL_S = 0.1
EMBEDDED_TRANSPORT = "shared.queue:EmbeddedTransport"

# Publishing: 3 retries, 0.2 s apart, then the caller sees the error (≈1 s with no broker).
PUBLISH_RETRY_POLICY = {
    "max_retries": 3,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}


class EmbeddedTransport(SQLAlchemyTransport):
    """kombu's SQLAlchemy transport, polled every 0.1 s instead of 1 s.

    kombu reads ``polling_interval`` from the transport options but this transport then hands
    every option to ``create_engine``, which rejects it; a subclass is the clean place to set it.
    """

    polling_interval = EMBEDDED_POLLING_INTERVAL_S


def _sqlite_dir(url: str) -> Path | None:
    if "sqlite:///" in url:
        path = url.split("sqlite:///", 1)[1]
        if path and path != ":memory:":
            return Path(path).parent
    return None


def celery_config(service: str, settings: Settings) -> dict[str, Any]:
    """Celery settings of ``service``; creates the embedded SQLite files' folder (lazily)."""
    check_deployed(settings, service)  # workers refuse the same bad deployed settings the APIs do
    broker = settings.broker_url or ""
    backend = settings.result_backend or ""
    for url in (broker, backend):
        folder = _sqlite_dir(url)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
    conf: dict[str, Any] = {
        "broker_url": broker,
        "result_backend": backend,
        "task_default_queue": settings.service_queue(service),
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_publish_retry_policy": PUBLISH_RETRY_POLICY,
        "task_always_eager": settings.celery_eager,
        "task_eager_propagates": False,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "result_extended": True,
        "result_expires": 7 * 24 * 3600,
        "worker_hijack_root_logger": False,
    }
    if broker.startswith("sqla+"):
        conf["broker_url"] = broker.removeprefix("sqla+")
        conf["broker_transport"] = EMBEDDED_TRANSPORT
        # kombu hands these options straight to create_engine: SQLite waits on locks held by
        # other processes (the service and its workers share the file) instead of failing.
        conf["broker_transport_options"] = {"connect_args": {"timeout": 30}}
    elif broker.startswith("redis"):
        conf["broker_transport_options"] = {"visibility_timeout": 3600}
    return conf


def make_celery(service: str, settings: Settings | None = None) -> Celery:
    """The Celery app of ``service``, configured from ``settings`` (default: the process's)
    the first time it is used."""
    app = Celery(f"k3stack.{service}", set_as_current=False)
    app.add_defaults(lambda: celery_config(service, settings or get_settings()))
    return app


def service_queues(service: str, settings: Settings | None = None) -> list[str]:
    """Queues a service's worker consumes: its own, plus the orchestrator's rollout queue and
    the verifier's per-kind queues."""
    settings = settings or get_settings()
    queues = [settings.service_queue(service)]
    if service == "orchestrator" and settings.orchestrator.rollout_queue not in queues:
        queues.append(settings.orchestrator.rollout_queue)
    if service == "verifier":
        queues += [f"{queues[0]}.{kind}" for kind in settings.verifier.job_kinds]
    return queues


def worker_groups(
    service: str, settings: Settings | None = None
) -> list[tuple[str, list[str], int]]:
    """(name, queues, concurrency) of each worker ``k3stack up`` starts for a service: one, except
    for the verifier, whose kernel and web queues get workers of their own (so that kernel and
    web jobs never wait behind each other, and ``web_workers`` web jobs run at once)."""
    settings = settings or get_settings()
    queues = service_queues(service, settings)
    conc = max(1, settings.service(service).workers)
    if service != "verifier":
        return [(f"{service}-worker", queues, conc)]
    own = {"kernel": settings.verifier.kernel_workers, "web": settings.verifier.web_workers}
    own = {kind: n for kind, n in own.items() if n > 0 and f"{queues[0]}.{kind}" in queues}
    rest = [q for q in queues if q not in {f"{queues[0]}.{kind}" for kind in own}]
    groups = [(f"{service}-worker", rest, conc)]
    for kind, n in own.items():
        groups.append((f"{service}-{kind}-worker", [f"{queues[0]}.{kind}"], n))
    return groups


def worker_argv(
    service: str,
    concurrency: int = 1,
    pool: str = "prefork",
    queues: list[str] | None = None,
    name: str | None = None,
) -> list[str]:
    """The command line ``k3stack up`` uses to start a service's worker."""
    return [
        "-m",
        "celery",
        "-A",
        f"services.{service}.tasks",
        "worker",
        "-Q",
        ",".join(queues or [service]),
        "-n",
        f"{name or service}@%h",
        "--concurrency",
        str(max(1, concurrency)),
        "--pool",
        pool,
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
