"""An installed agent whose binary the episode's sandbox cannot see (the host has it, the
sandbox's runtime shares no agent cache: microVM or docker today, here a process sandbox without
that folder bound) fails with an error naming what is missing and where, never a day that ends
rc 127 ("No such file or directory")."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from services.orchestrator.installed.catalog import AGENTS

pytestmark = pytest.mark.timeout(300)


def test_a_cli_missing_inside_the_sandbox_is_named(orch_db, agent_services, tmp_path, monkeypatch):
    from shared.settings import get_settings

    root = tmp_path / "agents"  # installed here on the host, bound into no sandbox
    agent = AGENTS["claude-code-cli"]
    binary = agent.binary_path(root)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    (agent.prefix(root) / ".installed").write_text("stand-in\n")
    monkeypatch.setenv("K3STACK_ORCHESTRATOR__AGENTS_DIR", str(root))
    get_settings.cache_clear()
    body = EpisodeCreate.model_validate({
        "task": {"scenario": "hr_onboarding", "seed": 0}, "harness": "claude-code-cli",
        "policy": {"kind": "oracle"}, "budgets": {"max_wall_s": 120},
    })  # fmt: skip
    episode_id = create_episode(orch_db, body, lambda _id: None)
    EpisodeRunner(orch_db, agent_services, episode_id).run()
    with orch_db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        status, code, message = row.status, row.error_code, row.error_message or ""
    assert (status, code) == ("failed", "NotInstalled"), (status, code, message)
    assert "not inside the episode's process sandbox" in message, message
    assert str(Path(binary)) in message and "K3STACK_SANDBOX__PROCESS_RO_BINDS" in message
