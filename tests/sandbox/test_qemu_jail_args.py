"""How the QEMU jail is asked for (no VM booted): the seccomp options, the uid drop and chroot as
root only, ``spawn`` allowed only where an allowlist pipes connections through ``nc``, and the
instance tag a restarted service reaps by. The jail itself is checked on real QEMU in
``test_qemu_jail_vm.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.sandbox.images.builder import get_image
from services.sandbox.runtime.base import NetworkPolicy, SandboxSpec
from services.sandbox.runtime.microvm import jail as jails
from services.sandbox.runtime.microvm.launch import qemu_cmdline


def _cmdline(jail: jails.Jail, spec: SandboxSpec) -> list[str]:
    image = get_image("busybox")
    sock = Path("/tmp/k3s/t")
    return qemu_cmdline(image, spec, "tcg", sock, Path("/dev/shm/x.mem"), incoming=False,
                        jail=jail, jail_dir=sock / "jail")  # fmt: skip


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_root_drops_uid_and_chroots_under_seccomp_without_spawn() -> None:
    argv = _cmdline(jails.Jail("abc", (999, 995)), SandboxSpec())
    seccomp = _after(argv, "-sandbox").split(",")
    assert seccomp[0] == "on" and {"obsolete=deny", "resourcecontrol=deny", "spawn=deny"} <= set(
        seccomp
    )
    assert _after(argv, "-runas") == "999:995" and _after(argv, "-chroot") == "/tmp/k3s/t/jail"
    assert _after(argv, "-name") == jails.tag_of("abc")


def test_forwards_allow_spawn_and_run_the_jails_busybox() -> None:
    spec = SandboxSpec(network=NetworkPolicy(mode="allowlist", allow=["127.0.0.1:8080"]))
    argv = _cmdline(jails.Jail("abc", (999, 995)), spec)
    assert "spawn=allow" in _after(argv, "-sandbox")
    assert "-cmd:/bin/busybox nc 127.0.0.1 8080" in _after(argv, "-netdev")


def test_without_root_no_drop_but_elevation_denied() -> None:
    argv = _cmdline(jails.Jail("abc", None), SandboxSpec())
    assert "elevateprivileges=deny" in _after(argv, "-sandbox")
    assert "-runas" not in argv and "-chroot" not in argv


def test_user_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jails.os, "geteuid", lambda: 0)
    assert jails.resolve_user("1234:5678") == (1234, 5678)
    assert jails.resolve_user("no-such-user-k3s") == jails.FALLBACK_IDS
    assert jails.resolve_user("") is None
    with pytest.raises(ValueError, match="root"):
        jails.resolve_user("0:0")
    monkeypatch.setattr(jails.os, "geteuid", lambda: 1000)
    assert jails.resolve_user("k3stack-vm") is None  # not root: nothing to drop
