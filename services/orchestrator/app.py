"""Orchestrator service: harness presets, episodes on Celery workers (queue ``orchestrator``),
their trajectories and reports; plus a fan-out health view of the platform."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import APIRouter, FastAPI, Request

from shared.app import create_app as create_service_app
from shared.clients import AsyncServiceClient, ServiceError
from shared.contracts.orchestrator import PlatformStatus, ServiceStatus
from shared.jobs import jobs_router
from shared.settings import SERVICE_NAMES, get_settings

router = APIRouter(tags=["platform"])


@router.get("/platform", response_model=PlatformStatus, operation_id="getPlatformStatus")
async def platform_status(request: Request) -> PlatformStatus:
    """Ask every other service for its health over HTTP, concurrently."""
    import asyncio

    settings = request.app.state.settings

    async def probe(name: str) -> ServiceStatus:
        client = AsyncServiceClient.for_service(name, settings, timeout=5.0)
        try:
            body = await client.get_json("/health")
            return ServiceStatus(
                service=name, url=client.base_url, healthy=body.get("status") == "ok", detail=body
            )
        except (ServiceError, OSError) as exc:
            return ServiceStatus(service=name, url=client.base_url, healthy=False, detail=str(exc))
        finally:
            await client.aclose()

    others = [n for n in SERVICE_NAMES if n != "orchestrator"]
    results = await asyncio.gather(*(probe(n) for n in others))
    return PlatformStatus(healthy=all(r.healthy for r in results), services=list(results))


def create_app(
    enqueue: Callable[[str], None] | None = None,
    rollout_enqueue: Callable[[str], None] | None = None,
) -> FastAPI:
    """``enqueue`` puts an episode id on the queue, ``rollout_enqueue`` a rollout sample's
    (default: the Celery tasks)."""
    from services.orchestrator.db import open_database
    from services.orchestrator.episode.runner import EpisodeStore
    from services.orchestrator.episode.service import EpisodeReaper, services_from_settings
    from services.orchestrator.rollouts.routes import router as rollouts_router
    from services.orchestrator.rollouts.service import reap_samples
    from services.orchestrator.routes import router as episodes_router

    settings = get_settings()
    db = open_database(settings.database_url or "")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db.migrate()
        app.state.db = db
        app.state.jobs = EpisodeStore(db, settings)  # episodes are jobs: GET /jobs shows them
        app.state.services = services_from_settings(settings)
        if enqueue is None:
            from services.orchestrator.tasks import enqueue_episode

            app.state.enqueue = enqueue_episode
        else:
            app.state.enqueue = enqueue
        if rollout_enqueue is None:
            from services.orchestrator.tasks import enqueue_rollout_sample

            app.state.rollout_enqueue = enqueue_rollout_sample
        else:
            app.state.rollout_enqueue = rollout_enqueue
        samples = partial(reap_samples, db, app.state.rollout_enqueue)
        app.state.reaper = EpisodeReaper(
            db, app.state.services, app.state.enqueue, settings.orchestrator.reaper_interval_s,
            also={"samples": samples},
        ).start()  # fmt: skip
        yield
        app.state.reaper.stop()
        db.close()

    return create_service_app(
        "orchestrator",
        routers=[router, episodes_router, rollouts_router, jobs_router()],
        lifespan=lifespan,
        health_checks={"database": db.ping},
        settings=settings,
        description="White-box harness, episodes, partial rollout, trajectories.",
    )
