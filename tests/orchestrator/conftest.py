"""Fixtures for orchestrator tests: a real tools service on a free port (its own process and
data dir), the orchestrator's database in a temp dir, and the service handles an episode uses.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.servers import _on_free_port

REPO = Path(__file__).resolve().parents[2]
# The tools service wants its admin key in every mode: every process here shares this one.
TOOLS_KEY = "tools-admin-key-orchestrator-tests"
TOOLS_ADMIN = {"X-API-Key": TOOLS_KEY}


@pytest.fixture(autouse=True)
def _tools_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_TOOLS__API_KEY", TOOLS_KEY)
    get_settings.cache_clear()


def service_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env.update(
        K3STACK_DATA_DIR=str(data_dir),
        K3STACK_ENV_FILE="/nonexistent/.env",
        K3STACK_AUTH_ENABLED="false",
        K3STACK_TOOLS__API_KEY=TOOLS_KEY,
        PYTHONPATH=str(REPO),
        **extra,
    )
    return env


@pytest.fixture(scope="session")
def tools_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The real tools service in its own process group."""
    data = tmp_path_factory.mktemp("tools-svc")
    with _on_free_port(
        lambda port: [sys.executable, "-m", "services.tools", "--port", str(port)],
        url_template="http://127.0.0.1:{port}",
        env=service_env(data),
        cwd=str(REPO),
        timeout=90.0,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def tools_url(tools_server: Any) -> str:
    return tools_server.url


@pytest.fixture(scope="session")
def tools_server_pgid(tools_server: Any) -> int:
    return tools_server.pgid


@pytest.fixture
def orch_db(tmp_path: Path) -> Iterator[Any]:
    from services.orchestrator.db import open_database

    db = open_database(f"sqlite:///{tmp_path}/orchestrator.db")
    db.migrate()
    yield db
    db.close()


@pytest.fixture
def services(tools_url: str, tmp_path: Path) -> Iterator[Any]:
    from services.orchestrator.episode.runner import Services
    from shared.clients import ModelClient, SandboxClient, ToolsClient
    from shared.objectstore import LocalObjectStore
    from shared.settings import get_settings

    settings = get_settings()
    svc = Services(
        tools=ToolsClient(tools_url, timeout=60.0),
        sandbox=SandboxClient("http://127.0.0.1:9", timeout=5.0, retries=0),
        model=ModelClient("http://127.0.0.1:9", timeout=5.0, retries=0),
        settings=settings,
        objects=LocalObjectStore(tmp_path / "objects"),
    )
    yield svc
    svc.tools.close()


@pytest.fixture
def agent_services(services: Any, sandbox_url: str) -> Any:
    """The episode's services with the real sandbox service, where an installed agent runs."""
    from shared.clients import SandboxClient

    services.sandbox = SandboxClient(sandbox_url, timeout=660.0)
    return services


def oracle_score(tools_url: str, scenario: str, seed: int) -> tuple[int, int]:
    """The tools service's own oracle (REST routes) on a fresh world: (passed, total)."""
    from datetime import datetime

    from services.tools.scenarios.api import WorldAPI
    from services.tools.scenarios.story import run_oracle

    with httpx.Client(base_url=tools_url, timeout=60.0, headers=TOOLS_ADMIN) as http:
        world = http.post("/worlds", json={"scenario": scenario, "seed": seed}).json()
        inst = http.get(f"/scenarios/{scenario}", params={"seed": seed}).json()
        run_oracle(inst["oracle"], datetime.fromisoformat(inst["end"]),
                   WorldAPI(http, world["id"], world["token"]))  # fmt: skip
        checks = http.get(f"/worlds/{world['id']}/checks").json()
        http.delete(f"/worlds/{world['id']}")
        return checks["events_passed"], checks["events_total"]


@pytest.fixture(scope="session")
def model_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real model service (reference engine, tiny K3 preset, random weights) over HTTP."""
    data = tmp_path_factory.mktemp("model-svc")
    with _on_free_port(
        lambda port: [sys.executable, "-m", "services.model", "--port", str(port)],
        url_template="http://127.0.0.1:{port}",
        env=service_env(data, OMP_NUM_THREADS="1"),  # the defaults `k3stack up` serves
        cwd=str(REPO),
        timeout=180.0,
        ready_text="Application startup complete",
    ) as server:
        yield server.url


@pytest.fixture(scope="session")
def sandbox_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real sandbox service (process runtime: no microVM needed) over HTTP."""
    data = tmp_path_factory.mktemp("sandbox-svc")
    env = service_env(data, K3STACK_SANDBOX__RUNTIME="process")
    with _on_free_port(
        lambda port: [sys.executable, "-m", "services.sandbox", "--port", str(port)],
        url_template="http://127.0.0.1:{port}", env=env, cwd=str(REPO), timeout=120.0,
    ) as server:  # fmt: skip
        yield server.url
