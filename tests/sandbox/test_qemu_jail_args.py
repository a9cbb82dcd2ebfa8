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


def test_root_without_the_drop_capabilities_keeps_qemu_seccomp_only(monkeypatch) -> None:
    """The compose and chart sandbox container is root with ``cap_drop: ALL``: chown, setuid and
    chroot would fail (EPERM: every microVM create was a 500 in e2e), so QEMU keeps the service's
    uid with seccomp and ``elevateprivileges=deny``, and the warning names what is missing."""
    from services.sandbox.runtime.microvm import jail

    monkeypatch.setattr(jail.os, "geteuid", lambda: 0)
    monkeypatch.setattr(jail, "missing_caps", lambda: ["chown", "setuid"])
    assert jail.resolve_user("1234:1234") is None
    args = jail.Jail("i", None).args(Path("/x"), spawn=False)
    assert "-runas" not in args and "-chroot" not in args
    assert any("elevateprivileges=deny" in a for a in args)
    monkeypatch.setattr(jail, "missing_caps", lambda: [])
    assert jail.resolve_user("1234:1234") == (1234, 1234)


def test_missing_caps_reads_the_effective_set() -> None:
    """Run with an empty bounding set (as a ``cap_drop: ALL`` container's root): all four are
    missing; this test's own process (root here) has them all."""
    import subprocess
    import sys

    from services.sandbox.runtime.microvm.jail import missing_caps

    assert missing_caps() == []
    code = "from services.sandbox.runtime.microvm.jail import missing_caps; print(missing_caps())"
    out = subprocess.run(
        ["setpriv", "--bounding-set", "-all", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert out.strip() == "['chown', 'setgid', 'setuid', 'sys_chroot']"
