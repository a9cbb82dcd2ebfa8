"""``k3stack run`` end to end on the deployed shape: the orchestrator service and a real Celery
worker (queue ``orchestrator``) as processes, the tools service over HTTP; the command follows
the episode and ends with the per-event score table and the report's address."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from services.orchestrator.cli import run
from shared.queue import worker_argv
from tests.helpers.servers import _on_free_port, spawn
from tests.orchestrator.conftest import REPO, service_env


@contextmanager
def orchestrator_processes(
    tools_url: str, tmp_path: Path, monkeypatch, sandbox_url: str = "http://127.0.0.1:9"
) -> Iterator[str]:
    """The orchestrator service and one Celery worker as processes (SQLite stores, the tools
    service at ``tools_url``, the sandbox service at ``sandbox_url``); the CLI's settings point
    at the service. Yields its URL."""
    env = service_env(
        tmp_path / "data",
        K3STACK_DATABASE_URL=f"sqlite:///{tmp_path}/orch.db",
        K3STACK_BROKER_URL=f"sqla+sqlite:///{tmp_path}/broker.db",
        K3STACK_RESULT_BACKEND=f"db+sqlite:///{tmp_path}/results.db",
        K3STACK_TOOLS__URL=tools_url,
        K3STACK_MODEL__URL="http://127.0.0.1:9",
        K3STACK_SANDBOX__URL=sandbox_url,
    )
    argv = [sys.executable, *worker_argv("orchestrator", concurrency=1, pool="solo")]
    with (
        _on_free_port(
            lambda port: [sys.executable, "-m", "services.orchestrator", "--port", str(port)],
            url_template="http://127.0.0.1:{port}", env=env, cwd=str(REPO), timeout=90.0,
        ) as api,
        spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=120),
    ):  # fmt: skip
        from shared.settings import get_settings

        monkeypatch.setenv("K3STACK_ORCHESTRATOR__URL", api.url)
        get_settings.cache_clear()
        yield api.url


def k3stack_run(*args: str):  # type: ignore[no-untyped-def]
    """``k3stack run ARGS`` as a user types it, in this process."""
    app = typer.Typer()
    app.command()(run)
    return CliRunner().invoke(app, list(args))


@pytest.mark.slow
def test_k3stack_run_follows_an_oracle_episode(tools_url, tmp_path: Path, monkeypatch) -> None:
    with orchestrator_processes(tools_url, tmp_path, monkeypatch) as api_url:
        result = k3stack_run(
            "--scenario", "finance_expenses", "--seed", "3", "--harness", "openclaw",
            "--policy", "oracle", "--poll-s", "0.2",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "per-event score" in result.output and "reward 1.000" in result.output
        report_url = result.output.strip().splitlines()[-1].split("report: ", 1)[1]
        page = httpx.get(report_url, timeout=30)
        assert page.status_code == 200 and "Simulated day" in page.text
        episodes = httpx.get(f"{api_url}/episodes", timeout=30).json()["episodes"]
        assert [e["status"] for e in episodes] == ["succeeded"]
