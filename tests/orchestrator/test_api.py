"""The episode API: every preset's oracle episode through POST /episodes reaches the oracle's
score with the preset's own tool names; bad input is a 400 naming the field."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.orchestrator.harness.config import PRESET_NAMES, load_harness
from shared.trajectory import Trajectory
from tests.orchestrator.conftest import oracle_score

SCENARIO = "finance_expenses"


@pytest.fixture
def sandbox_service_url(request) -> str:
    """Nothing listens (episodes here need no sandbox), or with ``indirect`` "real" the real
    sandbox service."""
    if getattr(request, "param", None) == "real":
        return request.getfixturevalue("sandbox_url")
    return "http://127.0.0.1:9"


@pytest.fixture
def api(tools_url: str, sandbox_service_url: str, tmp_path, monkeypatch) -> Iterator[TestClient]:
    from services.orchestrator.app import create_app
    from services.orchestrator.drivers import DRIVERS
    from services.orchestrator.episode.runner import EpisodeRunner
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_TOOLS__URL", tools_url)
    monkeypatch.setenv("K3STACK_MODEL__URL", "http://127.0.0.1:9")
    monkeypatch.setenv("K3STACK_SANDBOX__URL", sandbox_service_url)
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path / "data"))
    harnesses = tmp_path / "data" / "harnesses"
    harnesses.mkdir(parents=True)
    (harnesses / "no-prompt.yaml").write_text(
        "name: no-prompt\nsystem_prompt: missing.md.j2\ntools: [Bash]\n"
    )
    (harnesses / "no-tool.yaml").write_text(
        "name: no-tool\nsystem_prompt: claude-code.md.j2\ntools: [Bash, Teleport]\n"
    )
    monkeypatch.setenv("K3STACK_DATABASE_URL", f"sqlite:///{tmp_path}/orch.db")
    monkeypatch.setenv("K3STACK_ORCHESTRATOR__REAPER_INTERVAL_S", "0")
    get_settings.cache_clear()
    holder: dict[str, Any] = {}
    threads: list[threading.Thread] = []

    def enqueue(episode_id: str) -> None:
        app = holder["app"]
        runner = EpisodeRunner(app.state.db, app.state.services, episode_id, drivers=DRIVERS)
        t = threading.Thread(target=runner.run, daemon=True)
        threads.append(t)
        t.start()

    app = create_app(enqueue=enqueue)
    holder["app"] = app
    with TestClient(app) as client:
        yield client
        for t in threads:
            t.join(timeout=120)


def wait_done(client: TestClient, episode_id: str, timeout: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/episodes/{episode_id}").json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_every_preset_reaches_the_oracle_score(api, tools_url, preset: str) -> None:
    resp = api.post(
        "/episodes",
        json={"task": {"scenario": SCENARIO, "seed": 1}, "harness": preset,
              "policy": {"kind": "oracle"}},
    )  # fmt: skip
    assert resp.status_code == 202, resp.text
    ep = wait_done(api, resp.json()["id"])
    assert ep["status"] == "succeeded", ep
    passed, total = oracle_score(tools_url, SCENARIO, 1)
    assert (ep["events_passed"], ep["events_total"]) == (passed, total)
    assert ep["reward"] == pytest.approx(passed / total)
    assert len(ep["results"]) == total and all(r["passed"] for r in ep["results"])

    doc = api.get(f"/episodes/{ep['id']}/trajectory").json()
    traj = Trajectory.model_validate(doc)
    rule = load_harness(preset).mcp_tool_name
    model_steps = [s for s in traj.steps if s.kind == "model"]
    names = {c.function.name for s in model_steps for c in s.message.tool_calls or []}
    assert rule.format(server="gmail", tool="send_email") in names
    offered = {t.function.name for t in traj.tools}
    assert names <= offered
    for step in model_steps:  # every call answered by its observation, none failed
        calls = [c.id for c in step.message.tool_calls or []]
        assert [o.tool_call_id for o in step.observations] == calls
        assert not any(o.is_error for o in step.observations)
    assert traj.exit is not None and traj.exit.status == "completed"
    assert traj.metadata.reward == pytest.approx(passed / total)
    assert traj.metadata.harness == preset
    report = api.get(f"/episodes/{ep['id']}/report")
    assert report.status_code == 200 and "Simulated day" in report.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"task": {"scenario": SCENARIO}, "harness": "nope"}, "harness"),
        ({"task": {}}, "task"),
        ({"task": {"scenario": "no_such_scenario"}}, "task.scenario"),
        ({"task": {"instruction": "hi"}, "policy": {"kind": "oracle"}}, "oracle"),
        ({"task": {"scenario": SCENARIO}, "colour": "red"}, "colour"),
        ({"task": {"scenario": SCENARIO}, "budgets": {"max_steps": 0}}, "budgets.max_steps"),
        ({"task": {"scenario": SCENARIO}, "policy": {"seed": 2**70}}, "policy.seed"),
        ({"task": {"scenario": SCENARIO}, "policy": {"base_url": "not a url"}},
         "policy.base_url"),
        ({"task": {"scenario": SCENARIO}, "harness": "no-prompt"}, "system_prompt"),
        ({"task": {"scenario": SCENARIO}, "harness": "no-tool"}, "Teleport"),
        ({"task": {"scenario": SCENARIO}, "memory": {"CLAUDE.md": "x" * 5_000_000}}, "memory"),
        ({"task": {"scenario": SCENARIO}, "memory": {"NOTES.md": "x"}}, "memory.NOTES.md"),
        ({"task": {"scenario": SCENARIO}, "memory": {"CLAUDE.md": "x" * 25_001}}, "25,000"),
        ({"task": {"scenario": SCENARIO}, "budgets": {"max_wall_s": 1e308}}, "budgets.max_wall_s"),
        ({"task": {"scenario": SCENARIO}, "budgets": {"tool_timeout_s": 1e12}},
         "budgets.tool_timeout_s"),
        ({"task": {"scenario": SCENARIO}, "budgets": {"max_tokens": 10**15}}, "budgets.max_tokens"),
        ({"task": {"scenario": SCENARIO}, "budgets": {"steps_per_day": 10**9}},
         "budgets.steps_per_day"),
        ({"task": {"scenario": SCENARIO}, "context_window": 10**15}, "context_window"),
        ({"task": {"instruction": "hi"}, "harness": "claude-code-cli"}, "task.scenario"),
        ({"task": {"instruction": "hi"}, "harness": "codex-cli"}, "task.scenario"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(api, body: dict, field: str) -> None:
    resp = api.post("/episodes", json=body)
    assert resp.status_code == 400, resp.text
    assert field in resp.json()["message"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('"budgets": {"max_wall_s": Infinity}', "budgets.max_wall_s"),
        ('"budgets": {"tool_timeout_s": NaN}', "budgets.tool_timeout_s"),
        ('"policy": {"temperature": NaN}', "policy.temperature"),
        ('"policy": {"timeout_s": Infinity}', "policy.timeout_s"),
    ],
)
def test_infinity_and_nan_are_a_400_naming_the_field(api, raw: str, field: str) -> None:
    """JSON's non-standard Infinity / NaN (Python's json reads them): a wall budget that never
    ends is refused at the door, not queued."""
    body = '{"task": {"scenario": "' + SCENARIO + '"}, ' + raw + "}"
    resp = api.post("/episodes", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert field in resp.json()["message"]


@pytest.mark.parametrize("sandbox_service_url", ["real"], indirect=True)
def test_an_unknown_sandbox_template_is_a_400(api) -> None:
    """Checked against the real sandbox service at submit, not when the worker starts it."""
    resp = api.post("/episodes", json={"task": {"instruction": "hi",
                                                "sandbox_template": "no-such-template"}})  # fmt: skip
    assert resp.status_code == 400, resp.text
    assert "task.sandbox_template" in resp.json()["message"]
    ok = api.post("/episodes", json={"task": {"instruction": "hi", "sandbox_template": "busybox"},
                                     "policy": {"base_url": "http://127.0.0.1:9/v1"}})  # fmt: skip
    assert ok.status_code == 202, ok.text


def test_unknown_episode_is_404(api) -> None:
    for path in ("", "/trajectory", "/report"):
        assert api.get(f"/episodes/ep_missing{path}").status_code == 404
    assert api.post("/episodes/ep_missing/cancel").status_code == 404
