"""The microVM runtime's KVM boot probe: a QEMU that KVM refuses is a verdict (cached, TCG for
good on this host); a probe that only ran out of time is a loaded host, so TCG for now and KVM
is probed again later. QEMU and the guest are stood in for: what is under test is the decision."""

from __future__ import annotations

import json
import subprocess
import types
from pathlib import Path

import pytest

from services.sandbox.runtime.base import RuntimeUnavailable
from services.sandbox.runtime.microvm import accel as microvm
from services.sandbox.runtime.microvm.launch import GuestAgentError


class FakeProc:
    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def poll(self) -> int | None:
        return None if self.alive else 1


@pytest.fixture
def probe_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, object]:
    """/dev/kvm present, a fake image and cache dir; ``state['boot']`` says what a boot does."""
    state: dict[str, object] = {"boot": "crash", "launches": 0}
    real_access = microvm.os.access
    monkeypatch.setattr(
        microvm.os, "access", lambda p, m: True if p == "/dev/kvm" else real_access(p, m)
    )
    monkeypatch.setattr(microvm, "sandbox_cache_dir", lambda: tmp_path)
    image = types.SimpleNamespace(kernel=types.SimpleNamespace(version="test-kernel"))
    monkeypatch.setattr(microvm, "get_image", lambda name: image)
    monkeypatch.setattr(
        microvm.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="QEMU emulator version 9\n"),
    )

    def launch(*args: object, **kwargs: object) -> object:
        state["launches"] = int(state["launches"]) + 1  # type: ignore[arg-type]
        if state["boot"] == "crash":  # QEMU exits at once (KVM could not set an MSR)
            try:
                raise ConnectionResetError("connection reset by peer")
            except ConnectionResetError as exc:
                raise RuntimeUnavailable("QEMU did not start: kvm_buf_set_msrs") from exc
        if state["boot"] == "qmp_timeout":  # QEMU slow to open its monitor on a busy host
            try:
                raise TimeoutError("timed out")
            except TimeoutError as exc:
                raise RuntimeUnavailable("QEMU did not start: timed out") from exc
        return types.SimpleNamespace(proc=FakeProc(alive=True), sock_dir=tmp_path)

    def connect_agent(path: Path, timeout_s: float) -> object:
        if state["boot"] == "slow_guest":
            raise GuestAgentError("agent socket did not appear")
        return types.SimpleNamespace(ping=lambda: None, close=lambda: None)

    monkeypatch.setattr(microvm, "launch", launch)
    monkeypatch.setattr(microvm, "connect_agent", connect_agent)
    monkeypatch.setattr(microvm, "discard", lambda vm: None)
    state["cache"] = tmp_path / "accel.json"
    return state


def runtime(tmp_path: Path) -> microvm.Accelerator:
    return microvm.Accelerator("auto", shm=tmp_path, pids_max=64)


def test_a_crashing_kvm_is_a_cached_verdict(probe_env: dict, tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    assert rt.value == "tcg"
    assert json.loads(probe_env["cache"].read_text())["accel"] == "tcg"
    assert rt.reprobe_at is None
    assert rt.value == "tcg" and probe_env["launches"] == 1  # not probed again


@pytest.mark.parametrize("slowness", ["qmp_timeout", "slow_guest"])
def test_a_probe_that_ran_out_of_time_is_retried_later(
    probe_env: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slowness: str
) -> None:
    probe_env["boot"] = slowness
    rt = runtime(tmp_path)
    assert rt.value == "tcg"
    assert not probe_env["cache"].exists()  # no verdict written: a later process probes too
    assert rt.reprobe_at is not None
    assert rt.value == "tcg" and probe_env["launches"] == 1  # not before the retry time
    probe_env["boot"] = "ok"  # the load went away
    rt.reprobe_at = 0.0  # the retry time has come
    assert rt.value == "kvm" and probe_env["launches"] == 2
    assert json.loads(probe_env["cache"].read_text())["accel"] == "kvm"
    assert rt.reprobe_at is None
