"""Web verifier acceptance on a real QEMU microVM (markers ``vm`` and ``browser``): each app is
copied into a Debian microVM of the sandbox service (python3, nodejs, npm in the image), built
there (the ``package.json`` apps' scripts run by node, ``sh build.sh`` otherwise), served there
(the ``start`` script's node server, ``python3 -m http.server`` for static files), reached through the service's
guest-port route and driven by Debian's Chromium. Rewards in the right order, zeros where the
rules say zero.

On a host without QEMU, the guest kernel or the Debian image these FAIL, naming the setup
script (``scripts/setup_sandbox.sh``, which ``make setup`` runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.verifier.web.verify import verify_web
from shared.clients import SandboxClient
from tests.verifier.web_service import APPS, fake_image_app, sandbox_service

pytestmark = [pytest.mark.vm, pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    from services.sandbox.images.builder import find_debian_image

    with sandbox_service(tmp_path_factory.mktemp("sbx"), "auto") as client:
        mv = {r.name: r for r in client.runtimes()}["microvm"]
        if not mv.available:
            pytest.fail(f"microvm runtime unavailable ({mv.reason}): run scripts/setup_sandbox.sh")
        if find_debian_image() is None:
            pytest.fail(
                "the Debian image (with nodejs/npm) is not built: run scripts/setup_sandbox.sh"
            )
        yield client


def test_rewards_in_order_in_a_microvm(sandbox: SandboxClient, tmp_path: Path) -> None:
    apps = {
        n: APPS / n for n in ("correct", "partial", "build_fails", "runtime_error", "hardcoded")
    }
    apps["fake_image"] = fake_image_app(tmp_path / "fake")
    runs = {name: verify_web("counter_todo", path, sandbox) for name, path in apps.items()}
    for name, run in runs.items():
        assert run.runtime == "microvm runtime", (name, run.runtime)
        print(f"{name}: reward {run.reward:.3f} ({run.reason}); in the VM {run.sandbox_s} s")
    r = {k: v.reward for k, v in runs.items()}
    # correct: its start script runs its node server in the guest
    assert runs["correct"].pass_rate == 1.0 and runs["correct"].zero_rule is None, runs["correct"]
    assert r["correct"] > 0.9
    # partial: its build script (node) makes dist/, served by python3 -m http.server
    assert runs["partial"].zero_rule is None and runs["partial"].pass_rate == pytest.approx(2 / 3)
    assert "node build.js" in runs["partial"].build_log
    assert r["correct"] > r["partial"] > 0.0
    assert runs["build_fails"].zero_rule == "build_failed"
    assert "Cannot find module './missing'" in runs["build_fails"].build_log
    assert "script 'build' exited 1" in runs["build_fails"].build_log
    assert runs["runtime_error"].zero_rule == "runtime_error"
    assert "undefinedHelper" in runs["runtime_error"].reason
    assert runs["hardcoded"].zero_rule == "faked_artifact" and "counter" in runs["hardcoded"].reason
    assert runs["fake_image"].zero_rule == "faked_artifact"
    assert "static image" in runs["fake_image"].reason
    for name in ("build_fails", "runtime_error", "hardcoded", "fake_image"):
        assert r[name] == 0.0, (name, runs[name].reason)
