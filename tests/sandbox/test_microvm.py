"""The microvm runtime on real QEMU (marker ``vm``): exec, files, checkpoint/stop/restore,
incremental layers, fork. One booted VM is shared by the module where that is sound.

Missing QEMU or kernel FAILS these tests (run scripts/setup_sandbox.sh); they are not skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.sandbox.runtime.base import (
    ExecRequest,
    GuestFileNotFound,
    SandboxNotRunning,
    SandboxSpec,
)
from shared.objectstore import LocalObjectStore
from tests.sandbox.waiting import COUNTER, eventually

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def counter(runtime, h, above: int) -> int:  # type: ignore[no-untyped-def]
    """The in-guest ``/tmp/fork`` counter once past ``above`` (waits for it, generously)."""

    def read() -> int:
        try:
            return int(runtime.read_file(h, "/tmp/fork") or 0)
        except GuestFileNotFound:
            return 0

    return eventually(read, lambda n: n > above, what=f"/tmp/fork above {above}")


@pytest.fixture(scope="module")
def runtime():
    from services.sandbox.runtime.microvm import MicroVMRuntime

    rt = MicroVMRuntime()
    ok, why = rt.available()
    if not ok:
        pytest.fail(f"microvm runtime unavailable ({why}); run scripts/setup_sandbox.sh")
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return LocalObjectStore(tmp_path_factory.mktemp("objects"))


@pytest.fixture(scope="module")
def vm(runtime, tmp_path_factory):
    """One booted busybox VM, shared; tests that must not disturb it restore copies."""
    h = runtime.create("vm-main", SandboxSpec(), tmp_path_factory.mktemp("vm-main"))
    yield h
    runtime.destroy(h)


def _count(runtime, h) -> int:
    try:
        return int(runtime.read_file(h, "/tmp/count").decode().strip() or 0)
    except GuestFileNotFound:  # the counter has not written yet
        return 0


def _wait_count_above(runtime, h, n: int) -> int:  # type: ignore[no-untyped-def]
    return eventually(lambda: _count(runtime, h), lambda c: c > n, what=f"counter above {n}")


def _ram_mapping(h) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """KiB figures of QEMU's mapping of the guest RAM file (``/proc/<pid>/smaps``)."""
    out: dict[str, int] = {}
    lines = Path(f"/proc/{h.pid}/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(h.data["mem_path"]):
            for field in lines[i + 1 :]:
                key, _, rest = field.partition(":")
                if not rest.strip().endswith("kB"):
                    break
                out[key] = int(rest.split()[0])
            return out
    raise AssertionError(f"QEMU {h.pid} does not map {h.data['mem_path']}")


def test_exec_and_files(runtime, vm):
    r = runtime.exec(vm, ExecRequest(argv=["echo", "hello"]))
    assert (r.exit_code, r.stdout) == (0, "hello\n")
    r = runtime.exec(vm, ExecRequest(cmd="cat; echo $X; exit 4", stdin=b"in ", env={"X": "y"}))
    assert (r.exit_code, r.stdout) == (4, "in y\n")
    r = runtime.exec(vm, ExecRequest(cmd="sleep 10", timeout_s=0.5))
    assert r.timed_out
    info = runtime.write_file(vm, "/home/user/dir/a.txt", b"content")
    assert info.size == 7
    assert runtime.read_file(vm, "dir/a.txt") == b"content"  # relative to /home/user
    assert [e.name for e in runtime.list_dir(vm, "/home/user/dir")] == ["a.txt"]
    assert runtime.stat(vm, "/home/user/dir").is_dir
    runtime.remove(vm, "/home/user/dir", recursive=True)
    with pytest.raises(GuestFileNotFound):
        runtime.stat(vm, "/home/user/dir")
    events = list(runtime.exec_stream(vm, ExecRequest(cmd="echo 1; echo 2 >&2")))
    assert [e.kind for e in events][0] == "start" and events[-1].kind == "exit"


def test_pause_resume_keeps_files_and_background_process(runtime, vm, store, tmp_path):
    runtime.write_file(vm, "/home/user/keep.txt", b"kept across pause")
    bg = runtime.exec(vm, ExecRequest(cmd=COUNTER, background=True))
    assert bg.pid
    before = _wait_count_above(runtime, vm, 3)
    # pause = checkpoint + stop, on a restored copy so the shared VM keeps running
    ck = runtime.checkpoint(vm, None, store)
    assert ck.nonzero_pages > 0 and ck.stored_bytes > 0
    copy = runtime.restore("vm-copy", [ck], store, tmp_path / "copy")
    ck2 = runtime.checkpoint(copy, ck, store)
    # a restored VM's checkpoint reads the pages it wrote since the restore, not all of RAM
    assert 0 < ck2.stats["dirty_pages"] < ck.nonzero_pages // 4
    runtime.stop(copy)
    assert not runtime.is_alive(copy)
    assert not Path(copy.data["mem_path"]).exists()  # no memory held while paused
    with pytest.raises(SandboxNotRunning):
        runtime.exec(copy, ExecRequest(argv=["true"]))
    resumed = runtime.restore("vm-copy", [ck, ck2], store, tmp_path / "copy")
    try:
        assert runtime.read_file(resumed, "/home/user/keep.txt") == b"kept across pause"
        assert _count(runtime, resumed) >= before
        _wait_count_above(runtime, resumed, _count(runtime, resumed))  # still counting
        ps = runtime.exec(resumed, ExecRequest(cmd=f"kill -0 {bg.pid} && echo alive"))
        assert ps.stdout == "alive\n"
        # repeated pause/resume with a file append between each
        chain = [ck, ck2]
        h = resumed
        for i in range(5):
            runtime.exec(h, ExecRequest(cmd=f"echo {i} >> /home/user/log"))
            chain.append(runtime.checkpoint(h, chain[-1], store))
            runtime.stop(h)
            h = runtime.restore("vm-copy", chain, store, tmp_path / "copy")
        assert runtime.read_file(h, "/home/user/log") == b"".join(b"%d\n" % i for i in range(5))
        resumed = h
    finally:
        runtime.destroy(resumed)


def test_incremental_checkpoints_restore_a_and_b(runtime, vm, store, tmp_path):
    runtime.write_file(vm, "/home/user/state", b"A")
    a = runtime.checkpoint(vm, None, store)
    runtime.write_file(vm, "/home/user/state", b"B")
    runtime.exec(vm, ExecRequest(cmd="head -c 2000000 /dev/urandom > /tmp/blob"))
    b = runtime.checkpoint(vm, a, store)
    assert b.parent_id == a.id
    ram = b.memory_bytes
    assert b.stored_bytes < ram // 20, f"B stored {b.stored_bytes} bytes of {ram}"
    assert 0 < b.changed_pages < b.total_pages // 10
    runtime.write_file(vm, "/home/user/state", b"C")
    runtime.exec(vm, ExecRequest(cmd="rm /tmp/blob"))
    ha = runtime.restore("vm-a", [a], store, tmp_path / "a")
    try:
        assert runtime.read_file(ha, "/home/user/state") == b"A"
        assert runtime.exec(ha, ExecRequest(cmd="test -e /tmp/blob")).exit_code == 1
    finally:
        runtime.destroy(ha)
    hb = runtime.restore("vm-b", [a, b], store, tmp_path / "b")
    try:
        assert runtime.read_file(hb, "/home/user/state") == b"B"
        assert runtime.stat(hb, "/tmp/blob").size == 2_000_000
    finally:
        runtime.destroy(hb)
    assert runtime.read_file(vm, "/home/user/state") == b"C"


def test_fork_three_children_continue_and_diverge(runtime, vm, store, tmp_path):
    runtime.exec(vm, ExecRequest(cmd=COUNTER.replace("/tmp/count", "/tmp/fork"), background=True))
    counter(runtime, vm, above=1)
    ck = runtime.checkpoint(vm, None, store)
    at_fork = int(runtime.read_file(vm, "/tmp/fork"))
    children = []
    try:
        for i in range(3):
            children.append(runtime.restore(f"child-{i}", [ck], store, tmp_path / f"c{i}"))
        # copy-on-write: every child maps the checkpoint's one base file, and pages the
        # guests have only read are the same physical pages in all three QEMUs
        assert len({Path(c.data["mem_path"]).stat().st_ino for c in children}) == 1
        for c in children:
            assert _ram_mapping(c)["Shared_Clean"] > 0, "no guest page shared with a sibling"
        for i, c in enumerate(children):
            n = int(runtime.read_file(c, "/tmp/fork"))
            assert n >= at_fork - 1, (n, at_fork)  # continues from the parent's count
            runtime.write_file(c, "/home/user/who", f"child {i}".encode())
        for i, c in enumerate(children):
            assert runtime.read_file(c, "/home/user/who") == f"child {i}".encode()
            counter(runtime, c, above=at_fork)  # still counting
        with pytest.raises(GuestFileNotFound):
            runtime.read_file(vm, "/home/user/who")  # the parent did not see the children
        counter(runtime, vm, above=at_fork)  # the parent keeps running
    finally:
        for c in children:
            runtime.destroy(c)
