"""Orchestrator service: harnesses, episodes, rollouts. Wired today: a fan-out health view of
the platform through the shared clients (the smoke flow `make demo` uses)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request

from shared.app import create_app as create_service_app
from shared.clients import AsyncServiceClient, ServiceError
from shared.contracts.orchestrator import PlatformStatus, ServiceStatus
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


def create_app() -> FastAPI:
    return create_service_app(
        "orchestrator",
        routers=[router],
        settings=get_settings(),
        description="White-box harness, episodes, partial rollout, trajectories.",
    )
