"""An installed agent whose CLI is still at it when the episode's wall budget runs out: the
sandbox kills it, the day ends ``agent_timeout``, and the episode is scored and ends with that
named outcome (it failed with ``ValueError: 'agent_timeout' is not a valid StopReason``).

The CLI is a stand-in binary at the catalogue's path (a shell script that sleeps), in an agents
folder of this test's own, shared read-only into a sandbox service of this module's own."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.orchestrator.drivers import DRIVERS
from services.orchestrator.episode.export import to_shared, trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from services.orchestrator.installed.catalog import AGENTS
from shared.clients import SandboxClient
from tests.helpers.servers import _on_free_port
from tests.orchestrator.conftest import REPO, service_env

pytestmark = pytest.mark.timeout(300)
SLEEPER = "#!/bin/sh\nexec sleep 600\n"


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An agents folder whose claude-code-cli binary sleeps instead of answering."""
    root = tmp_path_factory.mktemp("agents")
    # the sandbox's unprivileged uid reads it (as it does the real cache); mktemp's folder is 0700
    root.chmod(0o755)
    agent = AGENTS["claude-code-cli"]
    binary = agent.binary_path(root)
    binary.parent.mkdir(parents=True)
    binary.write_text(SLEEPER)
    binary.chmod(0o755)
    (agent.prefix(root) / ".installed").write_text("stand-in\n")
    return root


@pytest.fixture(scope="module")
def sandbox_with_agents(tmp_path_factory: pytest.TempPathFactory, agents: Path) -> Iterator[str]:
    data = tmp_path_factory.mktemp("sandbox-svc")
    env = service_env(data, K3STACK_SANDBOX__RUNTIME="process",
                      K3STACK_SANDBOX__PROCESS_RO_BINDS=f'["{agents}"]')  # fmt: skip
    with _on_free_port(
        lambda port: [sys.executable, "-m", "services.sandbox", "--port", str(port)],
        url_template="http://127.0.0.1:{port}", env=env, cwd=str(REPO), timeout=120.0,
    ) as server:  # fmt: skip
        yield server.url


def test_a_cli_past_its_budget_is_scored_and_ends_agent_timeout(
    orch_db, services, sandbox_with_agents, agents, monkeypatch
) -> None:
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_ORCHESTRATOR__AGENTS_DIR", str(agents))
    get_settings.cache_clear()
    services.sandbox = SandboxClient(sandbox_with_agents, timeout=120.0)
    body = EpisodeCreate.model_validate({
        "task": {"scenario": "hr_onboarding", "seed": 0}, "harness": "claude-code-cli",
        "policy": {"kind": "oracle"}, "budgets": {"max_wall_s": 15},
    })  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, services, episode_id, drivers=DRIVERS).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        status, result, reward = row.status, row.result or {}, row.reward
        error = (row.error_code, row.error_message)
    assert status == "succeeded", error
    assert result["exit_reason"] == "agent_timeout", result
    assert result["events_total"] > 0 and reward is not None  # scored
    doc = trajectory(orch_db, episode_id)
    days = [i for i in doc["items"] if i["kind"] == "agent_day"]
    assert [d["outcome"] for d in days] == ["agent_timeout"], days
    exit_ = to_shared(doc).exit
    assert (exit_.status, exit_.reason) == ("timeout", "agent_timeout")
