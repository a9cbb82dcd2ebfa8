"""The files API never leaves the guest tree: paths resolved beneath it without a race
(``services/sandbox/runtime/beneath.py``), symlinks followed as the guest sees them, and a guest
swapping a directory for a symlink to a host folder mid-request (``renameat2(RENAME_EXCHANGE)``)
gets a 4xx, never a host file, and never writes outside its root."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.sandbox.api.errors import status_of
from services.sandbox.lifecycle.errors import SandboxError
from services.sandbox.runtime import beneath
from services.sandbox.runtime.beneath import GuestTree

RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically, as a hostile guest would (``renameat2``)."""
    at_fdcwd = -100
    if _libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


SWAPPER = """
import ctypes, os, sys
os.nice(19)  # the service keeps the CPU; swaps still land between its syscalls
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
n = 0
print("ready", flush=True)
while not sys.stdin.closed and n < 10_000_000:
    libc.renameat2(-100, a, -100, b, 2)
    n += 1
    if n % 256 == 0 and sys.stdin in __import__("select").select([sys.stdin], [], [], 0)[0]:
        break
print(n, flush=True)
"""


@contextmanager
def swapping(a: Path, b: Path) -> Iterator[list[int]]:
    """A process of its own (a guest's, not the service's, GIL) trading ``a`` and ``b`` in a
    loop until the block ends; the list holds its swap count afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", SWAPPER, str(a), str(b)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    count: list[int] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield count
    finally:
        out, _ = proc.communicate("stop\n", timeout=60)
        count.append(int(out.split()[-1]))


@pytest.fixture(params=["openat2", "walk"])
def tree(request, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A guest tree with ``/usr`` on a folder of its own, and a host folder beside it; once
    with ``openat2`` and once with the component walk alone (kernels without it)."""
    if request.param == "walk":
        monkeypatch.setattr(beneath, "_openat2_works", False)
    root, usr, host = tmp_path / "root", tmp_path / "usr", tmp_path / "host"
    for d in (root / "etc", root / "usr", root / "home/user", usr / "bin", host):
        d.mkdir(parents=True)
    (root / "etc/hostname").write_text("guest\n")
    (root / "usr/shadowed").write_text("under the /usr mount\n")
    (usr / "bin/tool").write_text("tool\n")
    (host / "secret").write_text("HOST\n")
    (root / "bin").symlink_to("usr/bin")  # debian's merged /usr
    (root / "home/user/abs").symlink_to(host)  # absolute: the guest's own path
    (root / "home/user/up").symlink_to("../../../../../etc")
    (root / "home/user/loop").symlink_to("loop")
    return GuestTree({"/": root, "/usr": usr}), root, usr, host


def read(t: GuestTree, gpath: str) -> bytes:
    with t.find(gpath) as f:
        if f.fd is None:
            raise FileNotFoundError(errno.ENOENT, gpath)
        fd = beneath.reopen(f.fd, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def test_symlinks_resolve_as_the_guest_sees_them(tree):  # type: ignore[no-untyped-def]
    t, root, usr, host = tree
    assert read(t, "/usr/bin/tool") == b"tool\n"  # the /usr mount
    assert read(t, "/bin/tool") == b"tool\n"  # through a symlink onto the /usr mount
    assert read(t, "/home/user/up/hostname") == b"guest\n"  # '..' stops at the guest root
    with pytest.raises(FileNotFoundError):  # the host folder's path, taken in the guest
        read(t, "/home/user/abs/secret")
    with pytest.raises(OSError) as e:
        read(t, "/home/user/loop")
    assert e.value.errno == errno.ELOOP
    with pytest.raises(FileNotFoundError):  # the mount covers what is under it
        read(t, "/usr/shadowed")
    with t.find("/home/user/abs", follow=False) as f:  # the link itself, not followed
        assert f.name == "abs" and f.fd is not None and os.path.islink(root / "home/user/abs")
    with t.find("/usr", follow=False) as f:
        assert f.name is None  # a mount point has no entry to remove


def test_parents_are_made_beneath_the_root(tree):  # type: ignore[no-untyped-def]
    t, root, usr, host = tree
    with t.find("/home/user/abs/made/new.txt", create_parents=True) as f:
        assert f.fd is None and f.name == "new.txt"
    assert (root / str(host).lstrip("/") / "made").is_dir()  # made in the guest tree
    assert sorted(p.name for p in host.iterdir()) == ["secret"]  # not in the host folder
    with t.find("/bin/sub/x", create_parents=True):
        pass
    assert (usr / "bin/sub").is_dir()


def test_a_swapped_symlink_never_leads_out_of_the_tree(tree):  # type: ignore[no-untyped-def]
    """The resolver alone against the swap, every answer a guest file or an error."""
    t, root, usr, host = tree
    d, s = root / "home/user/d", root / "home/user/s"
    d.mkdir()
    (d / "f").write_text("guest\n")
    s.symlink_to(host)
    (root / "home/user/s2").symlink_to(str(host) + "/")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            exchange(d, s)

    th = threading.Thread(target=swap, daemon=True)
    th.start()
    seen: Counter[str] = Counter()
    try:
        for _ in range(3000):
            try:
                seen[read(t, "/home/user/d/f").decode()] += 1
            except OSError as exc:
                seen[errno.errorcode[exc.errno or 0]] += 1
    finally:
        stop.set()
        th.join()
    assert "HOST\n" not in seen, seen
    assert seen["guest\n"] > 0, seen


def _files_of(host: Path) -> dict[str, bytes]:
    return {str(p.relative_to(host)): p.read_bytes() for p in host.rglob("*") if p.is_file()}


def _outcome(fn, *args) -> int:  # type: ignore[no-untyped-def]
    """HTTP status the API answers for a manager call (the routes map errors with status_of)."""
    try:
        out = fn(*args)
        if hasattr(out, "__next__"):
            assert b"HOST-ONLY" not in b"".join(out), "a host file came back"
        return 200
    except SandboxError as exc:
        code = status_of(exc)
        assert code < 500, exc.message
        assert "/home/user/d" in exc.message, exc.message  # names the path
        return code


def test_files_api_under_a_symlink_swap_race(proc, tmp_path):  # type: ignore[no-untyped-def]
    """2,000 reads and 2,000 writes while the guest's ``d`` and a symlink to a host folder trade
    places: no host file comes back, nothing lands outside the root, no 500 (a 4xx naming the
    path is fine). Failed before: host files came back (3 in 236 reads), writes went through.
    The bulk goes through the manager calls the routes make (an HTTP round trip costs 15 ms on
    a loaded CI host); 200 of each go through HTTP as well."""
    c, m = proc.client, proc.manager
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    host = tmp_path / "hostonly"
    (host / "sub").mkdir(parents=True)
    (host / "f").write_text("HOST-ONLY\n")
    before = _files_of(host)
    r = c.put(f"/sandboxes/{sid}/files", params={"path": "d/f"}, content=b"guest\n")
    assert r.status_code == 200, r.text
    home = m.state.workdir(sid) / "mnt/root/home/user"
    d, s = home / "d", home / "s"
    s.symlink_to(host)  # a guest's `ln -s <host path> s`: absolute, taken in the guest
    codes: Counter[str] = Counter()
    with swapping(d, s) as swaps:
        for i in range(2000):
            codes[f"read {_outcome(m.read_file_stream, sid, 'd/f')}"] += 1
            codes[f"write {_outcome(m.write_file, sid, f'd/sub/w{i % 7}', b'w', 0o644)}"] += 1
        for i in range(200):
            r = c.get(f"/sandboxes/{sid}/files", params={"path": "d/f"})
            assert b"HOST-ONLY" not in r.content, f"HTTP read {i} returned the host file"
            assert r.status_code < 500, r.text
            codes[f"http read {r.status_code}"] += 1
            r = c.put(f"/sandboxes/{sid}/files", params={"path": "d/sub/h"}, content=b"h")
            assert r.status_code < 500, r.text
            codes[f"http write {r.status_code}"] += 1
    assert swaps[0] > 100, swaps  # the race really ran
    assert codes["read 200"] > 0 and codes["write 200"] > 0, codes
    assert _files_of(host) == before, f"a write landed in the host folder ({codes})"


def test_hosts_written_at_start_stay_in_a_tree_the_guest_shaped(tmp_path):  # type: ignore[no-untyped-def]
    """A resumed sandbox's tree comes from its checkpoint, i.e. from the guest: an ``/etc``
    that is a symlink to a host folder gets the allowlist names inside the guest tree, and the
    host's ``hosts`` file stays as it was."""
    from services.sandbox.runtime.base import NetworkPolicy, SandboxSpec
    from services.sandbox.runtime.process.launch import LaunchMixin

    mnt, host = tmp_path / "mnt", tmp_path / "hostetc"
    (mnt / "usr").mkdir(parents=True)
    (mnt / "root").mkdir()
    host.mkdir()
    (host / "hosts").write_text("10.0.0.1 host-only\n")
    (mnt / "root/etc").symlink_to(host)  # the guest's `ln -s <host path> /etc`
    spec = SandboxSpec(network=NetworkPolicy(mode="allowlist", allow=["example.test:443"]))
    LaunchMixin._write_hosts(spec, mnt_root=mnt / "root")
    assert (host / "hosts").read_text() == "10.0.0.1 host-only\n"
    inside = mnt / "root" / str(host).lstrip("/") / "hosts"
    assert "127.0.0.100 example.test" in inside.read_text()


def test_make_dirs_stays_beneath_and_refuses_a_file(tree):  # type: ignore[no-untyped-def]
    t, root, usr, host = tree
    assert stat.S_ISDIR(t.make_dirs("/home/user/abs/deep/er").st_mode)
    assert (root / str(host).lstrip("/") / "deep/er").is_dir()
    assert sorted(p.name for p in host.iterdir()) == ["secret"]
    with pytest.raises(FileExistsError):
        t.make_dirs("/etc/hostname")


def test_files_api_ops_through_the_resolver(proc):  # type: ignore[no-untyped-def]
    """mkdir, write, list, stat, remove (plain and recursive) and a guest symlink, end to end."""
    c = proc.client
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    files = f"/sandboxes/{sid}/files"
    assert c.post(f"{files}/mkdir", params={"path": "a/b"}).json()["type"] == "dir"
    assert c.put(files, params={"path": "a/b/f"}, content=b"x").status_code == 200
    assert [e["name"] for e in c.get(f"{files}/list", params={"path": "a/b"}).json()] == ["f"]
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "ln -s /home/../etc /home/user/e; echo ok"})
    assert r.json()["stdout"] == "ok\n", r.text
    guest = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "cat /etc/hostname"}).json()["stdout"]
    assert c.get(files, params={"path": "e/hostname"}).text == guest  # as the guest sees it
    assert c.get(f"{files}/stat", params={"path": "e"}).json()["type"] != "dir"  # not followed
    assert c.get(files, params={"path": "a"}).status_code == 409  # a directory
    assert c.post(f"{files}/mkdir", params={"path": "a/b/f"}).status_code == 409  # a file
    assert c.delete(files, params={"path": "a"}).status_code == 409  # not empty
    assert c.delete(files, params={"path": "a", "recursive": True}).status_code == 204
    assert c.get(f"{files}/stat", params={"path": "a"}).status_code == 404
    assert c.delete(files, params={"path": "e"}).status_code == 204  # the link, not /etc
    assert c.get(f"{files}/stat", params={"path": "/etc/hostname"}).status_code == 200
