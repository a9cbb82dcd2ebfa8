"""Six web jobs submitted at once to a real stack (``k3stack up``: the sandbox and verifier services
and their Celery workers, embedded broker) while two CPU burners per core keep the machine busy.
Every job finishes with its own verdict — correct > partial > 0 for the fakes — none with an
infrastructure outcome, and no sandbox is left afterwards.

The web runtime is the process runtime (the named fallback): microVMs here run under TCG, and six
of them booting beside four burners would make this one test longer than the suite's budget;
the microVM path has its own ordering test (``test_web_vm.py``) and its fallback its own unit
tests (``test_web_start.py``)."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.contract.test_up import k3stack
from tests.contract.test_up_loaded import burners  # noqa: F401  (a fixture)
from tests.helpers.servers import free_port
from tests.verifier.web_service import APPS, fake_image_app

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1800)]

# (app, how many): two correct, two partial, two fakes of different kinds
JOBS = [("correct", 2), ("partial", 2), ("hardcoded", 1), ("fake_image", 1)]
INFRA = {"sandbox_unavailable", "infrastructure", "worker_lost"}


def _app_files(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    text, binary = {}, {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        try:
            text[rel] = data.decode()
        except UnicodeDecodeError:
            binary[rel] = base64.b64encode(data).decode()
    return text, binary


def test_six_web_jobs_at_once_under_two_burners_per_core(tmp_path, burners):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env["K3STACK_DATA_DIR"] = str(tmp_path / "data")
    env["K3STACK_VERIFIER__WEB_RUNTIME"] = "process"
    ports = {"sandbox": free_port(), "verifier": free_port()}
    for name, port in ports.items():
        env[f"K3STACK_{name.upper()}__PORT"] = str(port)
    apps = {name: APPS / name for name, _ in JOBS if name != "fake_image"}
    apps["fake_image"] = fake_image_app(tmp_path / "fake")
    try:
        # default start-up budget (600 s) under the burners; the subprocess bound sits above it
        up = k3stack("up", "--detach", "--services", "sandbox,verifier", env=env, timeout=700)
        assert up.returncode == 0, up.stdout + up.stderr
        verifier = httpx.Client(base_url=f"http://127.0.0.1:{ports['verifier']}", timeout=60)
        sandbox = httpx.Client(base_url=f"http://127.0.0.1:{ports['sandbox']}", timeout=60)

        submitted: list[tuple[str, str]] = []
        for name, count in JOBS:
            files, binary = _app_files(apps[name])
            for _ in range(count):
                resp = verifier.post(
                    "/verify/web",
                    json={"task": "counter_todo", "files": files, "binary_files": binary},
                )
                assert resp.status_code == 202, resp.text
                submitted.append((name, resp.json()["id"]))

        # Wait for every job to end; the bound is the test's own, well inside its timeout.
        done: dict[str, dict] = {}
        deadline = time.monotonic() + 1500
        while len(done) < len(submitted) and time.monotonic() < deadline:
            for _, jid in submitted:
                if jid not in done:
                    job = verifier.get(f"/jobs/{jid}").json()
                    if job["status"] in ("succeeded", "failed", "cancelled"):
                        done[jid] = job
            time.sleep(2)
        assert len(done) == len(submitted), f"jobs still running: {set(dict(submitted).values())}"

        rewards: dict[str, list[float]] = {}
        for name, jid in submitted:
            job = done[jid]
            assert job["status"] == "succeeded", (name, job.get("error"))
            result = job["result"]
            assert result.get("zero_rule") not in INFRA, (name, result)
            rewards.setdefault(name, []).append(result["reward"])
        print({k: [round(r, 3) for r in v] for k, v in rewards.items()})
        assert min(rewards["correct"]) > max(rewards["partial"]) > 0.0, rewards
        assert rewards["hardcoded"] == [0.0] and rewards["fake_image"] == [0.0], rewards
        assert sandbox.get("/sandboxes").json() == []
    finally:
        k3stack("down", env=env, timeout=120)
