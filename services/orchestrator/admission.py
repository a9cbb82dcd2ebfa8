"""What a submitted task names, checked against the services at the door: an unknown scenario
or sandbox template is a 400 naming the field, not a job that fails once a worker starts it.
Shared by the episode and the rollout routes."""

from __future__ import annotations

from services.orchestrator.episode.platform import Services
from shared.clients import ServiceError
from shared.contracts.orchestrator import TaskSpec
from shared.errors import APIError, bad_request


def check_task(svc: Services, task: TaskSpec, where: str = "task") -> None:
    """400 naming ``{where}.scenario`` / ``{where}.sandbox_template`` when the tools or the
    sandbox service does not know it; 503 when that service does not answer."""
    if task.scenario:
        try:
            svc.tools.scenario(task.scenario)
        except ServiceError as exc:
            if exc.status == 404:
                raise bad_request(f"{where}.scenario: unknown scenario {task.scenario!r}") from None
            raise APIError(503, "tools_unavailable", f"tools service: {exc}") from None
    if task.sandbox_template:
        try:
            svc.sandbox.template(task.sandbox_template)
        except ServiceError as exc:
            if exc.status == 404:
                raise bad_request(
                    f"{where}.sandbox_template: unknown template {task.sandbox_template!r}"
                ) from None
            raise APIError(503, "sandbox_unavailable", f"sandbox service: {exc}") from None
