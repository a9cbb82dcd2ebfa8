"""Celery app factory: one app per service, configured from settings.

Embedded mode (default) uses kombu's SQLAlchemy transport on a SQLite file under the data dir
and a SQLAlchemy result backend, so a laptop needs no broker server; deployed mode points
``K3STACK_BROKER_URL`` / ``K3STACK_RESULT_BACKEND`` at Redis. JSON only. Each service's tasks
live in ``services/<name>/tasks.py`` and go to the queue named after the service unless a task
says otherwise, so ``k3stack up`` can start one worker per service with ``-Q <service>``.
"""

from __future__ import annotations

from pathlib import Path

from celery import Celery

from shared.settings import Settings, check_deployed, get_settings


def _ensure_sqlite_dir(url: str) -> None:
    if "sqlite:///" in url:
        path = url.split("sqlite:///", 1)[1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


def make_celery(service: str, settings: Settings | None = None) -> Celery:
    """The Celery app of ``service``; its default queue is the service's name."""
    settings = settings or get_settings()
    check_deployed(settings, service)  # workers refuse the same bad deployed settings the APIs do
    broker = settings.broker_url or ""
    backend = settings.result_backend or ""
    _ensure_sqlite_dir(broker)
    _ensure_sqlite_dir(backend)
    app = Celery(f"k3stack.{service}", broker=broker, backend=backend)
    app.conf.update(
        task_default_queue=service,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        result_extended=True,
        result_expires=7 * 24 * 3600,
        worker_hijack_root_logger=False,
    )
    if broker.startswith("sqla+"):
        _tune_sqlalchemy_transport()
        # kombu hands these options straight to create_engine: SQLite waits on locks held by
        # other processes (the service and its workers share the file) instead of failing.
        app.conf.broker_transport_options = {"connect_args": {"timeout": 30}}
    elif broker.startswith("redis"):
        app.conf.broker_transport_options = {"visibility_timeout": 3600}
    return app


EMBEDDED_POLLING_INTERVAL_S = 0.1


def _tune_sqlalchemy_transport() -> None:
    """Poll the embedded broker every 0.1 s instead of kombu's 1 s.

    kombu reads ``polling_interval`` from the transport options but its SQLAlchemy transport
    then passes every option to ``create_engine``, which rejects it; the class attribute is
    the one place it can be set.
    """
    from kombu.transport.sqlalchemy import Transport

    Transport.polling_interval = EMBEDDED_POLLING_INTERVAL_S


def service_queues(service: str, settings: Settings | None = None) -> list[str]:
    """Queues a service's worker consumes: its own, plus the orchestrator's rollout queue."""
    settings = settings or get_settings()
    queues = [service]
    if service == "orchestrator" and settings.orchestrator.rollout_queue not in queues:
        queues.append(settings.orchestrator.rollout_queue)
    return queues


def worker_argv(
    service: str, concurrency: int = 1, pool: str = "prefork", queues: list[str] | None = None
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
        f"{service}@%h",
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
