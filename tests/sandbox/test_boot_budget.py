"""A microVM's boot wait follows the machine: the budget grows with the load per core, a guest
that misses it is booted once more, and a create that still fails names the budget and the
setting. QEMU and the guest agent are stood in for: what is under test is the waiting."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from services.sandbox.runtime.base import GuestAgentError, SandboxSpec
from services.sandbox.runtime.microvm import launch as microvm_launch
from services.sandbox.runtime.microvm import runtime as microvm


@pytest.mark.parametrize(
    ("load", "cores", "expected"),
    [(0.3, 2, 90.0), (2.0, 2, 90.0), (6.0, 2, 270.0), (40.0, 2, 720.0), (16.0, 16, 90.0)],
)
def test_the_budget_scales_with_load_per_core(
    monkeypatch: pytest.MonkeyPatch, load: float, cores: int, expected: float
) -> None:
    monkeypatch.setattr(microvm_launch.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(microvm_launch.os, "cpu_count", lambda: cores)
    budget, per_core = microvm_launch.boot_budget(90.0)
    assert budget == pytest.approx(expected) and per_core == pytest.approx(load / cores)


@pytest.fixture
def fake_boots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list]:
    """``boots['outcomes']``: what each boot's agent does (True answers, False times out)."""
    boots: dict[str, list] = {"outcomes": [], "budgets": [], "killed": []}
    monkeypatch.setattr(microvm_launch.os, "getloadavg", lambda: (6.0, 6.0, 6.0))
    monkeypatch.setattr(microvm_launch.os, "cpu_count", lambda: 2)

    def launch(*args: object, **kwargs: object) -> object:
        sock = tmp_path / f"vm{len(boots['budgets'])}"
        sock.mkdir()
        (sock / "console.log").write_text("[    0.0] booting slowly\n")
        proc = types.SimpleNamespace(pid=4242)
        return types.SimpleNamespace(proc=proc, qmp=None, mem_path=None, sock_dir=sock, cgroups=[])

    def connect_agent(path: Path, timeout_s: float) -> object:
        boots["budgets"].append(timeout_s)
        if not boots["outcomes"].pop(0):
            raise GuestAgentError("agent socket did not appear")
        return object()

    monkeypatch.setattr(microvm, "launch", launch)
    monkeypatch.setattr(microvm, "connect_agent", connect_agent)
    monkeypatch.setattr(microvm, "kill_vm", lambda *a: boots["killed"].append(a))
    monkeypatch.setattr(microvm, "SharedMemory", lambda path: None)
    return boots


def runtime(tmp_path: Path) -> microvm.MicroVMRuntime:
    rt = microvm.MicroVMRuntime(root=tmp_path / "vms", accel="tcg", boot_timeout_s=30.0)
    rt._require = lambda: None  # type: ignore[method-assign]
    rt._image = lambda name: types.SimpleNamespace(disk=None)  # type: ignore[method-assign]
    rt._handle = lambda *a: "handle"  # type: ignore[method-assign]
    rt._install = lambda *a: None  # type: ignore[method-assign]
    return rt


def test_a_guest_that_missed_its_budget_is_booted_once_more(
    fake_boots: dict[str, list], tmp_path: Path
) -> None:
    fake_boots["outcomes"] = [False, True]
    assert runtime(tmp_path).create("sbx-1", SandboxSpec(), tmp_path / "w") == "handle"
    assert fake_boots["budgets"] == [90.0, 90.0]  # 30 s x load 3 per core
    assert len(fake_boots["killed"]) == 1  # the first QEMU was ended, not left behind


def test_a_create_that_fails_twice_names_the_budget(
    fake_boots: dict[str, list], tmp_path: Path
) -> None:
    fake_boots["outcomes"] = [False, False]
    with pytest.raises(GuestAgentError) as err:
        runtime(tmp_path).create("sbx-1", SandboxSpec(), tmp_path / "w")
    message = str(err.value)
    assert "twice" in message and "90 s at load 3.0 per core" in message
    assert "K3STACK_SANDBOX__BOOT_TIMEOUT_S=30" in message and "booting slowly" in message
    assert len(fake_boots["killed"]) == 2
