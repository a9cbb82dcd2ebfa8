"""Wire models of the orchestrator service's answers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["PlatformStatus", "ServiceStatus"]


class ServiceStatus(BaseModel):
    service: str
    url: str
    healthy: bool
    detail: dict[str, Any] | str


class PlatformStatus(BaseModel):
    healthy: bool
    services: list[ServiceStatus]
