"""Per-command limits on the ``docker`` runtime (issue 24): a background fork bomb fills only
its own command cgroup, so the next command still runs, and killing the sandbox ends the bomb
and leaves no command cgroup behind. Real Docker Engine (cgroup v1 pids hierarchy here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.sandbox.runtime.docker_cgroups import PREFIX, container_cgroup
from services.sandbox.runtime.process.cgroups import RESERVE
from tests.sandbox.test_docker_runtime import _ensure_dockerd, create, sh
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(280)

PIDS_MAX = 256
BOMB = "b(){ b | b & }; b"


def _pids(cg: Path) -> int:
    try:
        return int((cg / "pids.current").read_text())
    except OSError:
        return 0


def test_docker_fork_bomb_does_not_starve_the_next_command(service):  # type: ignore[no-untyped-def]
    _ensure_dockerd()
    svc = service("docker", guest_pids_max=PIDS_MAX)
    rt = svc.manager.runtimes["docker"]
    ok, why = rt.cgroups.available()
    assert ok, why
    c = svc.client
    sid = create(c)
    parent = container_cgroup(svc.manager.live_handle(sid).pid)
    assert parent is not None and int((parent / "pids.max").read_text()) == PIDS_MAX

    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": BOMB, "background": True})
    assert r.status_code == 200, r.text
    bombs = eventually(lambda: [cg for cg in parent.glob(f"{PREFIX}*") if _pids(cg) > 8],
                       what="the bomb's command cgroup filling")  # fmt: skip
    assert len(bombs) == 1
    bomb = bombs[0]
    assert int((bomb / "pids.max").read_text()) == PIDS_MAX - RESERVE
    eventually(lambda: _pids(bomb), lambda n: n >= PIDS_MAX - RESERVE - 4,
               what="the bomb at its own limit")  # fmt: skip

    for _ in range(3):  # the next commands each get their own cgroup and room to run
        out = sh(c, sid, "echo alive; grep pids /proc/self/cgroup")
        assert out["exit_code"] == 0 and out["stdout"].startswith("alive\n"), out
        assert PREFIX in out["stdout"] and bomb.name not in out["stdout"], out
    assert _pids(bomb) <= PIDS_MAX - RESERVE  # held at its own bound

    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    eventually(lambda: parent.exists(), lambda e: not e, what="the container's cgroup removed")
