"""``k3stack verify``: registered through the k3stack.cli entry-point group; kernel runs with
progress, locally or through a live verifier service."""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path

import pytest
import uvicorn
from typer.testing import CliRunner

from services.verifier.cli import app
from services.verifier.kernel.spec import TASKS_DIR
from shared.settings import get_settings
from tests.helpers.servers import free_port
from tests.verifier.conftest import candidate

ROOT = Path(__file__).resolve().parents[2]


def test_registered_in_the_k3stack_cli_group() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["k3stack.cli"]["verify"] == "services.verifier.cli:app"


def test_tasks_and_bad_input() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["tasks"])
    assert (
        listed.exit_code == 0
        and "kda_step" in listed.stdout
        and "blackbox_function" in listed.stdout
    )
    missing = runner.invoke(app, ["kernel", "/nonexistent.py", "--task", "softmax", "--local"])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    unknown = runner.invoke(
        app, ["kernel", str(candidate("softmax", "honest")), "--task", "nope", "--local"]
    )
    assert unknown.exit_code == 2 and "no kernel task" in unknown.output


def test_static_cheat_locally_exits_nonzero() -> None:
    res = CliRunner().invoke(
        app, ["kernel", str(candidate("softmax", "library_call")), "--task", "softmax", "--local"]
    )
    assert res.exit_code == 1 and "reference_library_call" in res.stdout


@pytest.mark.slow
def test_kernel_through_a_live_service(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("K3STACK_DATABASE_URL", raising=False)
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
    monkeypatch.setenv("K3STACK_CELERY_EAGER", "true")
    get_settings.cache_clear()
    from services.verifier.app import create_app

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        res = CliRunner().invoke(
            app,
            [
                "kernel",
                str(TASKS_DIR / "softmax" / "expert.py"),
                "--task",
                "softmax",
                "--url",
                f"http://127.0.0.1:{port}",
                "--json",
            ],
        )
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        get_settings.cache_clear()
    assert res.exit_code == 0, res.output
    assert '"correct": true' in res.stdout
