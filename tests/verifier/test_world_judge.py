"""World checks through the tools service's HTTP API agree with the tools service, and its
model-judged checks are run by a judge model (a scripted OpenAI-compatible endpoint)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest
import uvicorn

from services.tools.scenarios import SCENARIOS
from services.tools.scenarios.api import WorldAPI
from services.verifier.judges.world import WorldJudgeRequest, judge_world
from shared.clients import ToolsClient
from shared.llm import openai_client
from tests.helpers.servers import free_port
from tests.tools.test_events import MiniScenario
from tests.verifier.scripted_llm import scripted_llm

TOOLS_KEY = "tools-admin-key-verifier-tests"  # management routes want one in every mode


@pytest.fixture(scope="module")
def tools_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real tools app behind uvicorn on a free port, with the tools tests' mini scenario."""
    from shared.settings import get_settings

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3STACK_DATA_DIR", str(tmp_path_factory.mktemp("tools")))
        mp.delenv("K3STACK_DATABASE_URL", raising=False)
        mp.setenv("K3STACK_AUTH_ENABLED", "false")
        mp.setenv("K3STACK_TOOLS__API_KEY", TOOLS_KEY)
        mp.setitem(SCENARIOS, "test_mini", MiniScenario())
        get_settings.cache_clear()
        from services.tools.app import create_app

        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "tools service did not start"
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
        thread.join(timeout=30)
        get_settings.cache_clear()


def polite_if_regards(system: str, user: str) -> str:
    return (
        '{"passed": true, "reason": "polite"}'
        if "regards" in user
        else '{"passed": false, "reason": "curt"}'
    )


def _world(tools: ToolsClient, url: str, reply: str) -> str:
    world = tools.create_world("test_mini")
    tools.advance(world.id, by="3h")
    with httpx.Client(base_url=url) as http:
        api = WorldAPI(http, world.id, world.token)
        api.gmail_reply(api.gmail_by_msgid("<ask@corp.test>"), reply)
    return world.id


@pytest.mark.parametrize(
    ("reply", "polite"), [("Yes, approved. Kind regards", True), ("yes", False)]
)
def test_world_checks_agree_with_the_tools_service(
    tools_url: str, reply: str, polite: bool
) -> None:
    with ToolsClient(tools_url, api_key=TOOLS_KEY) as tools, scripted_llm(polite_if_regards) as llm:
        world_id = _world(tools, tools_url, reply)
        at = datetime.fromisoformat("2025-03-04T10:00:00+00:00")
        result = judge_world(
            WorldJudgeRequest(world_id=world_id, at=at),
            tools,
            openai_client(base_url=llm.url, api_key="k"),
        )
        truth = tools.checks(world_id)
        assert tools.clock(world_id).now == at  # the verifier moved the world to the time point
    assert result.clock == truth.clock
    assert [e.event_id for e in result.events] == [e.event_id for e in truth.events]
    for mine, theirs in zip(result.events, truth.events, strict=True):
        assert mine.tools_passed == theirs.passed
        assert [c.model_dump() for c in mine.checks] == [c.model_dump() for c in theirs.checks]
    ask = next(e for e in result.events if e.event_id == "ask")
    assert [j.check_id for j in ask.judge_checks] == ["ask.judge"]
    assert ask.judge_checks[0].passed is polite
    assert ask.tools_passed  # the reply contains "yes" before the deadline
    assert ask.passed is polite
    assert result.events_passed == sum(e.passed for e in result.events)
    assert result.reward == pytest.approx(result.events_passed / result.events_total)
    # the judge saw the agent's mail through the tools service's resolved inputs
    assert any(reply in m["content"] for r in llm.requests for m in r["messages"])


def test_unknown_world_is_reported_by_the_tools_service(tools_url: str) -> None:
    from shared.clients import ServiceError

    with ToolsClient(tools_url, api_key=TOOLS_KEY) as tools, pytest.raises(ServiceError) as err:
        judge_world(WorldJudgeRequest(world_id="nope"), tools, None)
    assert err.value.status == 404
