"""The process runtime as a boundary, attacked from inside a sandbox: the host's sysctls, the
host-side identity of a command, host paths and devices, mounts and namespaces, and the system
calls the seccomp filter refuses. Each of these got through when commands ran as host root with
Docker's capability set.
"""

from __future__ import annotations

import os
import platform
import secrets
import subprocess
from pathlib import Path

import pytest

from services.sandbox.runtime.process.confine import (
    _ARCH,
    _DENY,
    child_confiner,
    seccomp_program,
)
from tests.sandbox.test_api_process import create, sh
from tests.sandbox.waiting import eventually

PRINTK = Path("/proc/sys/kernel/printk_ratelimit")


def test_a_write_to_proc_sys_fails_and_the_host_value_stays(proc):
    c = proc.client
    sid = create(c)
    before = PRINTK.read_text()
    try:
        out = sh(c, sid, f"echo {int(before) + 7} > {PRINTK}")
        assert out["exit_code"] != 0, out
        assert PRINTK.read_text() == before
        out = sh(c, sid, "echo '|/tmp/x %p' > /proc/sys/kernel/core_pattern")
        assert out["exit_code"] != 0, out
        assert sh(c, sid, "touch /sys/owned")["exit_code"] != 0
    finally:
        PRINTK.write_text(before)  # only needed where the test fails


def _host_status(token: str) -> dict[str, str]:
    """/proc/<pid>/status, read on the host, of the process whose argv ends with ``token``."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            if argv[:2] == [b"sleep", token.encode()]:
                lines = Path(f"/proc/{name}/status").read_text().splitlines()
                return dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        except OSError:
            continue
    return {}


def test_a_command_is_no_host_root_and_holds_no_capability(proc):
    c = proc.client
    sid = create(c)
    token = f"600.{secrets.randbelow(10**6)}"
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": f"sleep {token}", "background": True})
    assert r.status_code == 200, r.text
    status = eventually(lambda: _host_status(token), timeout_s=30, what="the command on the host")
    uids, gids = status["Uid"].split(), status["Gid"].split()
    assert "0" not in uids and "0" not in gids, status
    assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == 0
    assert int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    inside = sh(c, sid, "id -u")  # root inside its own user namespace only
    assert inside["stdout"] == "0\n"


def test_host_paths_and_devices_stay_out_of_reach(proc, tmp_path):
    c = proc.client
    sid = create(c)
    secret = tmp_path / f"host-only-{secrets.token_hex(4)}.txt"
    secret.write_text("host secret\n")
    out = sh(c, sid, f"cat {secret}")
    assert out["exit_code"] != 0 and "host secret" not in out["stdout"]
    dev = os.stat("/").st_dev  # the host's root disk, as a device node made in the sandbox
    out = sh(c, sid, f"mknod /tmp/disk b {os.major(dev)} {os.minor(dev)} && echo made")
    assert out["exit_code"] != 0 and "made" not in out["stdout"], out


def test_mounts_and_new_namespaces_are_refused(proc):
    c = proc.client
    sid = create(c)
    for cmd in (
        "mount -t tmpfs none /mnt && echo mounted",
        "unshare -Urm sh -c 'mount -t tmpfs none /mnt && echo mounted'",
        "unshare -n true && echo mounted",
        "unshare -p -f true && echo mounted",
    ):
        out = sh(c, sid, cmd)
        assert out["exit_code"] != 0 and "mounted" not in out["stdout"], (cmd, out)


def test_the_filter_refuses_kernel_facing_calls(proc):
    c = proc.client
    sid = create(c)
    table = _DENY[platform.machine()]
    names = ["bpf", "perf_event_open", "keyctl", "kexec_load", "init_module", "ptrace", "mount"]
    nrs = [table[n] for n in names] + [_ARCH[platform.machine()][2]]  # clone3 last
    script = (
        "import ctypes; l = ctypes.CDLL(None, use_errno=True); out = []\n"
        f"for n in {nrs}:\n"
        "    rc = l.syscall(n, 0, 0, 0, 0, 0); out.append(ctypes.get_errno() if rc == -1 else 0)\n"
        "print(out)"
    )
    out = sh(c, sid, f'python3 -c "{script}"')
    assert out["exit_code"] == 0, out
    assert out["stdout"].strip() == str([1] * len(names) + [38])  # EPERM each, clone3 ENOSYS


def test_files_the_api_writes_belong_to_the_sandbox(proc):
    c = proc.client
    sid = create(c)
    r = c.put(f"/sandboxes/{sid}/files", params={"path": "made/by/api.txt"}, content=b"one\n")
    assert r.status_code == 200, r.text
    out = sh(c, sid, "echo two >> made/by/api.txt && touch made/by/new && stat -c %u made/by")
    assert out["exit_code"] == 0 and out["stdout"] == "0\n", out
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "made/by/api.txt"}).content == (
        b"one\ntwo\n"
    )
    host = c.get(f"/sandboxes/{sid}/files", params={"path": "/etc/hostname"})
    assert host.status_code == 200  # reads still see the sandbox's own files


def test_the_filter_builds_for_each_machine_and_binds_a_host_child():
    """Without a sandbox: the program for each table, and a host child under the confiner."""
    for machine in _ARCH:
        prog = seccomp_program(machine)
        assert len(prog) % 8 == 0 and len(prog) // 8 > len(_DENY[machine])
    with pytest.raises(ValueError, match="no seccomp table"):
        seccomp_program("sparc")
    r = subprocess.run(
        ["sh", "-c", "grep -E '^(NoNewPrivs|Seccomp|Groups):' /proc/self/status; unshare -U true"],
        capture_output=True, text=True, preexec_fn=child_confiner(), timeout=30,
    )  # fmt: skip
    assert "NoNewPrivs:\t1" in r.stdout and "Seccomp:\t2" in r.stdout, r
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r


def test_only_the_usr_folders_a_sandbox_needs_show(proc):
    """The host's /usr/local (its own installs) stays out; the sandbox's /usr/local is empty
    and its own to install into; /usr/bin still serves."""
    probe = Path("/usr/local/share") / f"k3s-host-only-{secrets.token_hex(4)}"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.write_text("host only\n")
    try:
        c = proc.client
        sid = create(c)
        out = sh(c, sid, f"cat {probe}; ls -A /usr/local /usr/src 2>&1")
        assert "host only" not in out["stdout"] and probe.name not in out["stdout"], out
        out = sh(c, sid, "mkdir -p /usr/local/bin && echo 'echo mine' > /usr/local/bin/t && "
                         "sh /usr/local/bin/t && python3 -c 'print(2 + 2)'")  # fmt: skip
        assert out["stdout"] == "mine\n4\n", out
    finally:
        probe.unlink()
