"""The oracle run of the real CLIs not in ``test_installed_oracle.py`` (OpenClaw, Hermes, Qwen Code
and any CLI added by a spec): a file of its own so that ``--dist loadfile`` runs it beside the
first half on another worker."""

from __future__ import annotations

import pytest

from services.orchestrator.installed.catalog import AGENTS
from tests.orchestrator.test_installed_oracle import FIRST, check_oracle_run

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("preset", [a for a in AGENTS if a not in FIRST])
def test_real_cli_driven_by_the_oracle_scores_every_event(
    orch_db, agent_services, tools_url, preset
):
    check_oracle_run(orch_db, agent_services, tools_url, preset)


def test_the_two_halves_cover_every_cli() -> None:
    assert set(FIRST) <= set(AGENTS) and len(AGENTS) >= 6
