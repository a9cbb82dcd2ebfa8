"""The real Claude Code CLI in its sandbox against a policy endpoint that names the model it
serves and refuses every call: the CLI is told the served name (it was ``k3``, which the model
service does not serve), and the refused day ends ``policy_error``, scored, the job ``failed``
with the policy's answer (it ended its turn on the API error and the day counted as normal)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.export import trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from services.orchestrator.installed.catalog import AGENTS
from tests.helpers.asgi import serve

pytestmark = pytest.mark.timeout(600)
SERVED = "served-model-7"


def _refusing() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": SERVED, "object": "model"}]}

    @app.post("/v1/{path:path}")
    def refuse(path: str) -> JSONResponse:
        error = {"type": "invalid_request_error", "message": "this endpoint refuses everything"}
        return JSONResponse({"type": "error", "error": error}, status_code=400)

    return app


def test_the_served_model_is_asked_for_and_a_refusal_ends_the_day_policy_error(
    orch_db, agent_services
) -> None:
    assert AGENTS["claude-code-cli"].installed(), "run scripts/setup_agents.sh"
    with serve(_refusing()) as url:
        body = EpisodeCreate.model_validate({
            "task": {"scenario": "hr_onboarding", "seed": 0}, "harness": "claude-code-cli",
            "policy": {"kind": "openai", "base_url": f"{url}/v1"},
            "budgets": {"max_wall_s": 240, "steps_per_day": 1},
        })  # fmt: skip
        episode_id = create_episode(orch_db, body, lambda _id: None)
        EpisodeRunner(orch_db, agent_services, episode_id, drivers=DRIVERS).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        status, code, message, result = row.status, row.error_code, row.error_message, row.result
    assert (status, code) == ("failed", "policy_error"), (status, code, message)
    assert "400" in message and "refuses everything" in message, message
    assert result["exit_reason"] == "policy_error" and result["events_total"] > 0  # scored
    doc = trajectory(orch_db, episode_id)
    days = [i for i in doc["items"] if i["kind"] == "agent_day"]
    assert [d["outcome"] for d in days] == ["policy_error"], days
    asked = {x["request"].get("model") for x in doc["items"] if x["kind"] == "exchange"}
    assert asked == {SERVED}, asked
