"""Web verifier on the sandbox service's ``process`` runtime (bubblewrap, no network): the named
fallback for hosts without microVMs. Opened through the guest-port route, driven by Debian's
Chromium. The ordering acceptance runs in a microVM: ``test_web_vm.py``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.verifier.web.verify import BadWebCandidate, choose_runtime, verify_web
from shared.clients import SandboxClient
from tests.verifier.scripted_llm import scripted_llm
from tests.verifier.web_service import APPS, sandbox_service

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    with sandbox_service(tmp_path_factory.mktemp("sbx"), "process") as client:
        yield client


def test_auto_falls_back_to_process_and_says_so(
    sandbox: SandboxClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared.settings import get_settings

    # an empty image cache: the service's microvm runtime has no guest kernel
    monkeypatch.setenv("K3STACK_SANDBOX__CACHE_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        runtime, note = choose_runtime(sandbox, "auto")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert runtime == "process"
    assert note.startswith("process runtime (fallback: microvm unavailable") and "kernel" in note
    assert choose_runtime(sandbox, "process") == ("process", "process runtime (requested)")


def test_bad_candidate(tmp_path: Path, sandbox: SandboxClient) -> None:
    with pytest.raises(BadWebCandidate, match="not a directory"):
        verify_web("counter_todo", tmp_path / "missing", sandbox, runtime="process")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadWebCandidate, match="empty"):
        verify_web("counter_todo", tmp_path / "empty", sandbox, runtime="process")


def _npm_app(root: Path, package: dict) -> Path:
    (root / "index.html").write_text("<p>an npm app</p>")
    (root / "package.json").write_text(json.dumps(package))
    return root


def test_server_that_never_answers_gets_zero_with_its_log(
    tmp_path: Path, sandbox: SandboxClient
) -> None:
    start = "node -e \"console.error('port taken'); process.exit(1)\""
    app = _npm_app(tmp_path, {"scripts": {"start": start}})
    res = verify_web("counter_todo", app, sandbox, runtime="process", server_timeout_s=5)
    assert res.zero_rule == "no_server" and res.reward == 0.0, res
    assert "port taken" in res.build_log


def test_dependencies_the_sandbox_cannot_fetch_fail_the_build(
    tmp_path: Path, sandbox: SandboxClient
) -> None:
    deps = {"dependencies": {"left-pad": "1.3.0"}, "scripts": {"build": "echo built"}}
    res = verify_web("counter_todo", _npm_app(tmp_path, deps), sandbox, runtime="process")
    assert res.zero_rule == "build_failed" and res.reward == 0.0, res
    assert "npm install exited" in res.build_log and "> build:" not in res.build_log


def test_web_job_through_the_api_with_a_judge_stores_screenshots(
    sandbox: SandboxClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from shared.objectstore import make_object_store
    from shared.settings import get_settings

    with scripted_llm(lambda system, user: '{"score": 9, "reason": "meets the spec"}') as llm:
        monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
        monkeypatch.delenv("K3STACK_DATABASE_URL", raising=False)
        monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
        monkeypatch.setenv("K3STACK_CELERY_EAGER", "true")
        monkeypatch.setenv("K3STACK_SANDBOX__URL", sandbox.base_url)
        monkeypatch.setenv("K3STACK_VERIFIER__WEB_RUNTIME", "process")
        monkeypatch.setenv("K3STACK_LLM_URL", llm.url)
        monkeypatch.setenv("K3STACK_VERIFIER__JUDGE_MODEL", "scripted-judge")
        get_settings.cache_clear()
        from services.verifier.app import create_app

        files = {p.name: p.read_text() for p in (APPS / "correct").iterdir()}
        with TestClient(create_app()) as c:
            assert c.post("/verify/web", json={"task": "nope", "files": files}).status_code == 404
            bad = {"task": "counter_todo", "files": {"../x": "y"}}
            assert c.post("/verify/web", json=bad).status_code == 400
            resp = c.post(
                "/verify/web", json={"task": "counter_todo", "files": files, "judge": True}
            )
            assert resp.status_code == 202, resp.text
            job = c.get(f"/jobs/{resp.json()['id']}").json()
            assert job["status"] == "succeeded", job
            assert c.app.state.jobs.task_of(job["id"])[1] == "verifier.web"
            result = job["result"]
            assert result["runtime"] == "process runtime (requested)"
            assert result["pass_rate"] == 1.0 and result["judge"]["score"] == pytest.approx(0.9)
            assert result["judge"]["reason"] == "meets the spec"
            assert "counter" in llm.requests[0]["messages"][1]["content"]  # the spec went along
            keys = result["artefacts"]
            assert f"verifier/jobs/{job['id']}/screenshots/initial.png" in keys
            with make_object_store(get_settings()).open(keys[0]) as f:
                assert f.read()[:8] == b"\x89PNG\r\n\x1a\n"
    get_settings.cache_clear()


def test_a_sandbox_creation_that_times_out_leaves_no_sandbox_behind(
    sandbox: SandboxClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The create is bounded at 10 ms, so the client gives up while the service still creates
    the sandbox; the job fails, and the sandboxes it left are found by their tag and killed."""
    from fastapi.testclient import TestClient

    from services.verifier.web.verify import TAG_KEY
    from shared.settings import get_settings

    _verifier_env(
        monkeypatch, sandbox, tmp_path, WEB_CREATE_TIMEOUT_S="0.01", WEB_ORPHAN_GRACE_S="20"
    )
    from services.verifier.app import create_app

    files = {p.name: p.read_text() for p in (APPS / "correct").iterdir()}
    try:
        with TestClient(create_app()) as c:
            resp = c.post("/verify/web", json={"task": "counter_todo", "files": files})
            job = c.get(f"/jobs/{resp.json()['id']}").json()
    finally:
        get_settings.cache_clear()
    assert job["status"] == "failed" and "timeout" in job["error"]["message"], job
    # tried twice (a loaded host's create), then an infrastructure outcome, not a verdict
    assert job["error"]["code"] == "sandbox_unavailable", job["error"]
    assert "process try 2" in job["error"]["message"], job["error"]
    for _ in range(6):  # the service takes a second or two to finish the abandoned create
        assert sandbox.list(metadata=f"{TAG_KEY}=job-{job['id']}") == []
        time.sleep(1)


def _verifier_env(
    monkeypatch: pytest.MonkeyPatch, sandbox: SandboxClient, tmp_path: Path, **verifier: str
) -> None:
    """The verifier app's settings for an in-process, eager run against ``sandbox``."""
    from shared.settings import get_settings

    for name, value in {
        "K3STACK_DATA_DIR": str(tmp_path), "K3STACK_AUTH_ENABLED": "false",
        "K3STACK_CELERY_EAGER": "true", "K3STACK_SANDBOX__URL": sandbox.base_url,
        "K3STACK_VERIFIER__WEB_RUNTIME": "process",
        **{f"K3STACK_VERIFIER__{k}": v for k, v in verifier.items()},
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("K3STACK_DATABASE_URL", raising=False)
    get_settings.cache_clear()
