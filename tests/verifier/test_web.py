"""Web verifier: apps built and served in a sandbox of the real sandbox service (process
runtime here: bubblewrap, no network), opened through its guest-port route, driven by Debian's
Chromium. Rewards in the right order, with zeros where the rules say zero."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from services.verifier.web.browser import run_checks
from services.verifier.web.spec import load_web_task
from services.verifier.web.verify import BadWebCandidate, _serve_reference, verify_web
from shared.clients import SandboxClient
from shared.settings import load_settings
from tests.helpers.servers import free_port

APPS = Path(__file__).parent / "web_apps"
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    from services.sandbox.app import create_app

    settings = load_settings(
        data_dir=tmp_path_factory.mktemp("sbx"),
        sandbox={"runtime": "process", "reaper_interval_s": 3600},
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, background=False), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    with SandboxClient(f"http://127.0.0.1:{port}") as client:
        yield client
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def fake_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake app: a screenshot of the reference, as a page."""
    task = load_web_task("counter_todo")
    dest = tmp_path_factory.mktemp("fake") / "app"
    shutil.copytree(APPS / "fake_image", dest)
    with _serve_reference(task.reference_dir) as url:
        shot = run_checks(url, task.checks[:1], "w", task.viewport).screenshots["initial"]
    (dest / "shot.png").write_bytes(shot)
    return dest


def test_rewards_in_order_with_zeros_where_the_rules_say(
    sandbox: SandboxClient, fake_image: Path
) -> None:
    runs = {
        name: verify_web("counter_todo", APPS / name, sandbox, template="debian")
        for name in ("correct", "partial", "build_fails", "runtime_error", "hardcoded")
    }
    runs["fake_image"] = verify_web("counter_todo", fake_image, sandbox, template="debian")
    r = {k: v.reward for k, v in runs.items()}
    assert runs["correct"].pass_rate == 1.0 and runs["correct"].zero_rule is None, runs["correct"]
    assert r["correct"] > 0.9
    assert runs["partial"].zero_rule is None and runs["partial"].pass_rate == pytest.approx(2 / 3)
    assert r["correct"] > r["partial"] > 0.0
    assert (
        runs["build_fails"].zero_rule == "build_failed"
        and "cannot find module" in runs["build_fails"].build_log
    )
    assert (
        runs["runtime_error"].zero_rule == "runtime_error"
        and "undefinedHelper" in runs["runtime_error"].reason
    )
    assert runs["hardcoded"].zero_rule == "faked_artifact" and "counter" in runs["hardcoded"].reason
    assert (
        runs["fake_image"].zero_rule == "faked_artifact"
        and "static image" in runs["fake_image"].reason
    )
    for name in ("build_fails", "runtime_error", "hardcoded", "fake_image"):
        assert r[name] == 0.0, (name, runs[name].reason)


def test_bad_candidate(tmp_path: Path, sandbox: SandboxClient) -> None:
    with pytest.raises(BadWebCandidate, match="not a directory"):
        verify_web("counter_todo", tmp_path / "missing", sandbox)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadWebCandidate, match="empty"):
        verify_web("counter_todo", tmp_path / "empty", sandbox)


def test_web_job_through_the_api_stores_screenshots(
    sandbox: SandboxClient, tmp_path: Path, monkeypatch
) -> None:
    from fastapi.testclient import TestClient

    from shared.objectstore import make_object_store
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("K3STACK_DATABASE_URL", raising=False)
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
    monkeypatch.setenv("K3STACK_CELERY_EAGER", "true")
    monkeypatch.setenv("K3STACK_SANDBOX__URL", sandbox.base_url)
    get_settings.cache_clear()
    from services.verifier.app import create_app

    files = {p.name: p.read_text() for p in (APPS / "correct").iterdir()}
    with TestClient(create_app()) as c:
        assert c.post("/verify/web", json={"task": "nope", "files": files}).status_code == 404
        assert (
            c.post("/verify/web", json={"task": "counter_todo", "files": {"../x": "y"}}).status_code
            == 400
        )
        resp = c.post("/verify/web", json={"task": "counter_todo", "files": files})
        assert resp.status_code == 202, resp.text
        job = c.get(f"/jobs/{resp.json()['id']}").json()
        assert job["status"] == "succeeded", job
        assert c.app.state.jobs.task_of(job["id"])[1] == "verifier.web"
        keys = job["result"]["artefacts"]
        assert f"verifier/jobs/{job['id']}/screenshots/initial.png" in keys
        with make_object_store(get_settings()).open(keys[0]) as f:
            assert f.read()[:8] == b"\x89PNG\r\n\x1a\n"
    get_settings.cache_clear()
