"""Process sandboxes apart from each other and from the host's services (issues 36 and 37),
attacked from inside a sandbox and, for a guest that got past its namespaces, with its host
credentials: each sandbox runs as its own host uid (claimed from a range, kept across a service
restart, freed on kill), so one sandbox's uid can neither read another's root nor signal its
processes; and a sandbox's network namespace reaches PostgreSQL, Redis or a service's port on
the host only where the allowlist names it. Before, every sandbox ran as uid 100000.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import threading
from pathlib import Path

from services.sandbox.runtime.process.launch import STAGE_ROOT
from tests.sandbox.test_api_process import create, sh
from tests.sandbox.test_process_isolation import _host_status
from tests.sandbox.waiting import eventually

CANONICAL = 100000
"""``process_guest_uid`` (the default): the owner on disk, never a running sandbox's uid."""


def _host_uid(c, sid: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(host uid, host pid) of a background ``sleep`` started in the sandbox."""
    token = f"600.{secrets.randbelow(10**6)}"
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": f"sleep {token}", "background": True})
    assert r.status_code == 200, r.text
    status = eventually(lambda: _host_status(token), timeout_s=30, what="the command on the host")
    return int(status["Uid"].split()[0]), int(status["Pid"])


def _as_uid(uid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` on the host with only ``uid``'s credentials: a guest that left its namespaces."""
    return subprocess.run(
        ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--", *argv],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def test_each_sandbox_has_its_own_uid_that_opens_nothing_of_another(proc):
    c = proc.client
    a, b = create(c), create(c)
    assert sh(c, b, "echo b-secret > /home/user/secret.txt")["exit_code"] == 0
    uid_a, _ = _host_uid(c, a)
    uid_b, pid_b = _host_uid(c, b)
    assert len({uid_a, uid_b, 0, CANONICAL}) == 4, (uid_a, uid_b)
    assert sh(c, a, "id -u; stat -c %u /home/user")["stdout"] == "0\n0\n"  # root of its own tree

    # from inside A: B's root and processes are not even there
    for path in (STAGE_ROOT / b / "root/home/user/secret.txt", f"/proc/{pid_b}/root/etc/hostname"):
        out = sh(c, a, f"cat {path}")
        assert out["exit_code"] != 0 and "b-secret" not in out["stdout"], out
    # with A's host uid (out of its namespaces): B's root is closed, B's processes untouchable
    secret = STAGE_ROOT / b / "root" / "home/user/secret.txt"
    assert secret.read_text() == "b-secret\n"  # the path is right: the host reads it
    r = _as_uid(uid_a, ["cat", str(secret)])
    assert r.returncode != 0 and "b-secret" not in r.stdout and "denied" in r.stderr, r
    r = _as_uid(uid_a, ["kill", "-0", str(pid_b)])
    assert r.returncode != 0, r
    r = _as_uid(uid_b, ["cat", str(secret)])  # B's own uid does read it
    assert r.stdout == "b-secret\n", r
    root = Path(proc.settings.data_dir) / "sandbox"
    stored = next(root.rglob("upper/root/home/user/secret.txt"))  # where B's files rest
    workdir = stored.parents[4]
    for folder in (workdir, root / "process"):  # B's workdir, the images
        assert folder.stat().st_mode & 0o077 == 0 and folder.stat().st_uid == 0, folder
    r = _as_uid(uid_a, ["cat", str(stored)])
    assert r.returncode != 0 and "b-secret" not in r.stdout, r


def test_the_uid_is_kept_across_a_restart_and_freed_on_kill(service):  # type: ignore[no-untyped-def]
    svc = service("process", on_shutdown="keep")
    sid = create(svc.client)
    uid, _ = _host_uid(svc.client, sid)
    claims = Path(svc.settings.data_dir) / "sandbox" / "process" / "uids"
    assert (claims / str(uid)).read_text() == sid
    assert sh(svc.client, sid, "echo kept > /home/user/f")["exit_code"] == 0
    upper = next((Path(svc.settings.data_dir) / "sandbox").rglob("upper/root/home/user/f"))
    assert upper.stat().st_uid == CANONICAL  # stored as the canonical owner, shown as its own

    c = svc.restart()  # adopted: same sandbox, same uid
    assert sh(c, sid, "cat /home/user/f")["stdout"] == "kept\n"
    assert _host_uid(c, sid)[0] == uid
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    assert not (claims / str(uid)).exists()  # stopped: the uid is free again
    assert c.post(f"/sandboxes/{sid}/resume", json={}).status_code in (200, 201)
    again, _ = _host_uid(c, sid)
    assert sh(c, sid, "cat /home/user/f; stat -c %u /home/user/f")["stdout"] == "kept\n0\n"
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    assert not (claims / str(again)).exists()


@contextlib.contextmanager
def _host_listener():  # type: ignore[no-untyped-def]
    """A TCP server on the host's 127.0.0.1 (a k3stack service's port) answering ``pong``."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = srv.accept()
                conn.sendall(b"pong\n")
                conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        srv.close()


DIAL = (
    "import socket, sys\n"
    "for hp in sys.argv[1:]:\n"
    "    h, p = hp.rsplit(':', 1)\n"
    "    try:\n"
    "        s = socket.create_connection((h, int(p)), timeout=5); print(hp, 'open', s.recv(8))\n"
    "    except OSError as e:\n"
    "        print(hp, 'refused', e.errno)\n"
)


def test_host_services_are_reachable_only_when_allowed(proc):
    c = proc.client
    with _host_listener() as port:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the host reaches it
        targets = [f"127.0.0.1:{p}" for p in (5432, 6379, port)] + [f"localhost:{port}"]
        shut = create(c)
        c.put(f"/sandboxes/{shut}/files", params={"path": "dial.py"}, content=DIAL.encode())
        out = sh(c, shut, f"python3 dial.py {' '.join(targets)}")
        assert out["exit_code"] == 0 and "open" not in out["stdout"], out
        assert out["stdout"].count("refused") == len(targets), out

        allowed = create(c, network={"mode": "allowlist", "allow": [f"127.0.0.1:{port}"]})
        c.put(f"/sandboxes/{allowed}/files", params={"path": "dial.py"}, content=DIAL.encode())
        guest = c.get(f"/sandboxes/{allowed}").json()["guest_addresses"][f"127.0.0.1:{port}"]
        out = sh(c, allowed, f"python3 dial.py {guest} 127.0.0.1:5432 127.0.0.1:6379")
        lines = out["stdout"].splitlines()
        assert lines[0] == f"{guest} open b'pong\\n'", out
        assert all("refused" in ln for ln in lines[1:]), out
    assert os.geteuid() == 0  # the runtime's own precondition, stated
