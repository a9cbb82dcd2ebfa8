"""QEMU is jailed (issue 36, marker ``vm``): a booted microVM's QEMU — and one restored from
its checkpoint — runs as an unprivileged uid with no capabilities, ``no_new_privs``, seccomp
mode 2, chrooted into a folder of its own, in a cgroup of its own with a memory limit; and it
still does its work there (exec, checkpoint into its chroot, restore).

Missing QEMU or kernel FAILS these tests (run scripts/setup_sandbox.sh); they are not skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.sandbox.runtime.base import ExecRequest, SandboxSpec
from shared.objectstore import LocalObjectStore

pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.timeout(600)]


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def memory_limit(pid: int) -> int:
    """The memory limit of ``pid``'s own cgroup (v2 ``memory.max`` or v1's limit)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "" and Path(f"/sys/fs/cgroup{path}/memory.max").exists():
            return int(Path(f"/sys/fs/cgroup{path}/memory.max").read_text())
        if "memory" in ctrls.split(","):
            assert "k3stack-vm" in path, f"QEMU in {path}, not a VM cgroup of its own"
            return int(Path(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes").read_text())
    raise AssertionError(f"QEMU {pid} is in no memory cgroup")


def assert_jailed(pid: int, spec: SandboxSpec, jail: str) -> None:
    st = status(pid)
    assert "0" not in st["Uid"].split(), st["Uid"]
    assert "0" not in st["Gid"].split(), st["Gid"]
    assert st["Seccomp"] == "2", st["Seccomp"]
    assert st["NoNewPrivs"] == "1" and int(st["CapEff"], 16) == 0, st
    assert os.readlink(f"/proc/{pid}/root") == jail  # chrooted into its own folder
    assert not {"qmp.sock", "agent.sock", "console.log"} & set(os.listdir(jail))  # out of reach
    limit = memory_limit(pid)
    assert spec.memory_mb << 20 < limit < (spec.memory_mb + 1024) << 20, limit


def test_booted_and_restored_qemus_are_jailed_and_work(tmp_path):  # type: ignore[no-untyped-def]
    from services.sandbox.runtime.microvm import MicroVMRuntime

    if os.geteuid() != 0:
        pytest.fail("the QEMU jail (-runas, -chroot, cgroups) needs the service to run as root")
    rt = MicroVMRuntime(root=tmp_path / "root", pool_size=0)
    ok, why = rt.available()
    if not ok:
        pytest.fail(f"microvm runtime unavailable ({why}); run scripts/setup_sandbox.sh")
    store = LocalObjectStore(tmp_path / "objects")
    spec = SandboxSpec()
    h = rt.create("jailed", spec, tmp_path / "vm")
    restored = None
    try:
        assert_jailed(h.pid, spec, h.data["jail"])
        assert rt.exec(h, ExecRequest(cmd="echo hi > /root/f")).exit_code == 0
        ck = rt.checkpoint(h, None, store)  # QEMU writes its device state inside its chroot
        restored = rt.restore("jailed-copy", [ck], store, tmp_path / "copy")
        assert_jailed(restored.pid, spec, restored.data["jail"])
        assert rt.read_file(restored, "/root/f") == b"hi\n"
    finally:
        for handle in (restored, h):
            if handle is not None:
                rt.destroy(handle)
        rt.close()
    for handle in (h, restored):
        assert handle is not None
        for cg in handle.data["cgroups"]:
            assert not Path(cg).exists(), f"the VM's cgroup {cg} outlived it"
