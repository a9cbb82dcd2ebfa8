"""Restore by default (issue 24): the service prewarms QEMUs for the templates of
``warm_pool_templates`` (busybox by default) at start, so the first resume of a fresh checkpoint takes a pooled QEMU (its pages copied in,
no QEMU started); the checkpoint's base is then pooled, so a repeated restore copies nothing.

Real QEMU (marker ``vm``); missing QEMU or kernel fails, it is not skipped.
"""

from __future__ import annotations

import pytest

from services.sandbox.runtime.base import SandboxSpec
from shared.contracts.sandbox import NewSandbox
from tests.sandbox.waiting import eventually

pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]


def _default_spec() -> SandboxSpec:
    req = NewSandbox(templateID="busybox")
    return SandboxSpec(image="busybox", cpu=req.cpuCount, memory_mb=req.memoryMB,
                       network=req.network)  # fmt: skip


def _sh(c, sid: str, cmd: str) -> dict:  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd})
    assert r.status_code == 200, r.text
    return r.json()


def _prewarmed(svc, n: int):  # type: ignore[no-untyped-def]
    """The microvm runtime once ``n`` QEMUs wait for busybox restores; with image and spec."""
    rt = svc.manager.runtimes["microvm"]
    ok, why = rt.available()
    assert ok, f"microvm runtime unavailable ({why}): run scripts/setup_sandbox.sh"
    image, spec = rt._image("busybox"), _default_spec()
    eventually(lambda: rt.pool.count(image, spec, rt.accel, None), lambda k: k >= n,
               what=f"{n} prewarmed QEMU(s) for busybox")  # fmt: skip
    return rt, image, spec


def test_first_restore_of_fresh_checkpoint_takes_prewarmed_qemu(service):  # type: ignore[no-untyped-def]
    svc = service("microvm", warm_pool=1)
    c, m = svc.client, svc.manager
    # prewarmed at start, in the background: no sandbox has been created or restored yet
    rt, image, spec = _prewarmed(svc, 1)
    pooled_pid = next(v.proc.pid for v in rt.pool._vms if v.base is None)

    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    assert _sh(c, sid, "echo kept > /tmp/mark")["exit_code"] == 0
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204  # a fresh checkpoint
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    h = m.live_handle(sid)
    stats = h.data["restore_stats"]
    assert stats["pooled"] and stats["pool"] == "template", stats
    assert h.pid == pooled_pid  # the very QEMU that waited since start
    assert not stats["base_assembled"], stats
    out = _sh(c, sid, "cat /tmp/mark; echo more >> /tmp/mark")
    assert out["stdout"] == "kept\n", out

    # the template pool refills, and the restored checkpoint's base is pooled behind it
    eventually(lambda: rt.pool.count(image, spec, rt.accel, None), lambda n: n >= 1,
               what="the template pool refilled")  # fmt: skip
    ck_id = h.restored_from
    eventually(lambda: rt.pool.count(image, spec, rt.accel, ck_id), lambda n: n >= 1,
               what="a QEMU on the restored checkpoint's base")  # fmt: skip
    r = c.post(f"/sandboxes/{sid}/restore", json={"checkpoint_id": ck_id})
    assert r.status_code in (200, 201), r.text
    stats = m.live_handle(sid).data["restore_stats"]
    assert stats["pooled"] and stats["pool"] == "base", stats
    assert _sh(c, sid, "cat /tmp/mark")["stdout"] == "kept\n"  # the checkpoint, not later writes


def test_warm_pool_templates_setting_decides_what_is_prewarmed(service):  # type: ignore[no-untyped-def]
    """``warm_pool_templates`` lists the templates prewarmed at start and ``warm_pool`` sizes
    each pool; a template that does not exist is logged and skipped, the others still pooled."""
    svc = service("microvm", warm_pool=2, warm_pool_templates=["no-such-template", "busybox"])
    _prewarmed(svc, 2)


def test_no_prewarm_when_no_template_is_listed(service):  # type: ignore[no-untyped-def]
    svc = service("microvm", warm_pool=1, warm_pool_templates=[])
    m = svc.manager
    rt = m.runtimes["microvm"]
    m._prewarm.join(timeout=60)
    assert not m._prewarm.is_alive()
    assert rt.pool.count(rt._image("busybox"), _default_spec(), rt.accel, None) == 0
