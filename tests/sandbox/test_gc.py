"""Garbage collection of checkpoints and stored objects, and ``DELETE /checkpoints/{id}``.

Mostly on the ``process`` runtime (fast); one ``vm`` test proves the microvm runtime's pages
of a killed sandbox are reclaimed while a fork child (whose chain goes through its killed
parent's checkpoints) still restores.
"""

from __future__ import annotations

import pytest

from tests.sandbox.waiting import FakeClock


def create(c, **body):  # type: ignore[no-untyped-def]
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, **body})
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def write(c, sid, path, data: bytes) -> None:  # type: ignore[no-untyped-def]
    r = c.put(f"/sandboxes/{sid}/files", params={"path": path}, content=data)
    assert r.status_code == 200, r.text


def read(c, sid, path) -> bytes:  # type: ignore[no-untyped-def]
    r = c.get(f"/sandboxes/{sid}/files", params={"path": path})
    assert r.status_code == 200, r.text
    return r.content


def checkpoint(c, sid) -> dict:  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/checkpoints", json={})
    assert r.status_code == 201, r.text
    return r.json()


def gc(c, grace_s: float = 0) -> dict:  # type: ignore[no-untyped-def]
    r = c.post("/gc", params={"grace_s": grace_s})
    assert r.status_code == 200, r.text
    return r.json()


def keys(svc, prefix: str = "") -> set[str]:  # type: ignore[no-untyped-def]
    return {i.key for i in svc.manager.store.list(prefix)}


def blob_keys(svc, ck_id: str) -> set[str]:  # type: ignore[no-untyped-def]
    m = svc.manager
    return m.runtimes["process"].referenced_keys(m.manifest(ck_id), m.store)


def test_killed_sandbox_is_collected_and_shared_objects_survive(proc):
    c = proc.client
    shared = b"shared content\n" * 1000
    a, b = create(c), create(c)
    for sid in (a, b):
        write(c, sid, "shared.bin", shared)
    write(c, a, "only-a.bin", b"a" * 5000)
    write(c, b, "only-b.bin", b"b" * 5000)
    ck_a, ck_b = checkpoint(c, a), checkpoint(c, b)
    a_keys = blob_keys(proc, ck_a["id"]) | {f"sandbox/manifests/{ck_a['id']}.json"}
    b_keys = blob_keys(proc, ck_b["id"]) | {f"sandbox/manifests/{ck_b['id']}.json"}
    common = a_keys & b_keys
    assert common, "identical files dedup to one blob"
    before = keys(proc)
    assert a_keys | b_keys <= before

    assert gc(c)["objects_deleted"] == 0  # nothing is garbage while both live
    assert c.delete(f"/sandboxes/{a}").status_code == 204
    report = gc(c)
    assert report["checkpoints_deleted"] == 1 and report["bytes_freed"] > 0
    after = keys(proc)
    assert not (a_keys - b_keys) & after, "the killed sandbox's own objects are gone"
    assert b_keys <= after, "the survivor's objects (shared ones too) are kept"
    assert c.get(f"/checkpoints/{ck_a['id']}").status_code == 404

    assert c.post(f"/sandboxes/{b}/pause").status_code == 204
    assert c.post(f"/sandboxes/{b}/resume", json={}).status_code == 201
    assert read(c, b, "shared.bin") == shared and read(c, b, "only-b.bin") == b"b" * 5000
    write(c, b, "only-b.bin", b"changed")
    r = c.post(f"/sandboxes/{b}/restore", json={"checkpoint_id": ck_b["id"]})
    assert r.status_code == 200, r.text
    assert read(c, b, "shared.bin") == shared and read(c, b, "only-b.bin") == b"b" * 5000
    proc.manager.check_invariants()


def test_fork_child_survives_its_parent_kill_and_gc(proc):
    c = proc.client
    parent = create(c)
    write(c, parent, "data.txt", b"from the parent\n")
    r = c.post(f"/sandboxes/{parent}/fork", json={"count": 1, "memory": False})
    assert r.status_code == 201, r.text
    child = r.json()[0]["sandbox"]["sandboxID"]
    fork_ck = c.get(f"/sandboxes/{child}").json()["forked_from"]
    write(c, parent, "later.txt", b"parent only\n")
    later = checkpoint(c, parent)

    assert c.delete(f"/sandboxes/{parent}").status_code == 204
    report = gc(c)
    assert report["checkpoints_deleted"] == 1  # the parent's later checkpoint; not the fork one
    assert c.get(f"/checkpoints/{later['id']}").status_code == 404
    assert c.get(f"/checkpoints/{fork_ck}").status_code == 200
    assert f"sandbox/manifests/{fork_ck}.json" in keys(proc)

    write(c, child, "data.txt", b"child changed it\n")
    r = c.post(f"/sandboxes/{child}/restore", json={"checkpoint_id": fork_ck})
    assert r.status_code == 200, r.text
    assert read(c, child, "data.txt") == b"from the parent\n"
    assert c.post(f"/sandboxes/{child}/pause").status_code == 204
    gc(c)
    assert c.post(f"/sandboxes/{child}/resume", json={}).status_code == 201
    assert read(c, child, "data.txt") == b"from the parent\n"
    assert [x["id"] for x in c.get(f"/sandboxes/{child}/lineage").json()][0] == fork_ck

    assert c.delete(f"/sandboxes/{child}").status_code == 204
    report = gc(c)
    assert report["checkpoints_reachable"] == 0
    assert not keys(proc, "sandbox/"), "everything goes once no sandbox is left"
    proc.manager.check_invariants()


def test_grace_period_protects_fresh_objects(proc):
    c = proc.client
    sid = create(c)
    write(c, sid, "f.txt", b"fresh\n")
    ck = checkpoint(c, sid)
    ck_keys = blob_keys(proc, ck["id"]) | {f"sandbox/manifests/{ck['id']}.json"}
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    report = gc(c, grace_s=3600)
    assert report["objects_deleted"] == 0 and report["objects_in_grace"] >= len(ck_keys)
    assert ck_keys <= keys(proc)
    stale = proc.manager.workdir("sbx-stale")  # e.g. left by a crash
    stale.mkdir(parents=True)
    (stale / "junk").write_bytes(b"x" * 100)
    live = create(c)
    report = gc(c, grace_s=0)
    assert report["objects_deleted"] >= len(ck_keys)
    assert not ck_keys & keys(proc)
    assert not stale.exists() and report["local_bytes_freed"] >= 100
    assert proc.manager.workdir(live).exists()


def test_delete_checkpoint_rules(proc):
    c = proc.client
    assert c.delete("/checkpoints/ckpt-nope").status_code == 404
    sid = create(c)
    write(c, sid, "v.txt", b"1")
    first = checkpoint(c, sid)
    write(c, sid, "v.txt", b"2")
    second = checkpoint(c, sid)

    r = c.delete(f"/checkpoints/{second['id']}")
    assert r.status_code == 409 and sid in r.json()["message"], r.text  # head
    r = c.delete(f"/checkpoints/{first['id']}")
    assert r.status_code == 409 and second["id"] in r.json()["message"], r.text  # parent

    r = c.post(f"/sandboxes/{sid}/restore", json={"checkpoint_id": first["id"]})
    assert r.status_code == 200, r.text
    assert c.delete(f"/checkpoints/{second['id']}").status_code == 204  # a leaf nobody needs
    assert c.get(f"/checkpoints/{second['id']}").status_code == 404
    assert read(c, sid, "v.txt") == b"1"

    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 1, "memory": False})
    child = r.json()[0]["sandbox"]["sandboxID"]
    src = c.get(f"/sandboxes/{child}").json()["forked_from"]
    r = c.delete(f"/checkpoints/{src}")
    assert r.status_code == 409, r.text
    assert child in r.json()["message"] or sid in r.json()["message"]
    assert c.delete(f"/sandboxes/{child}").status_code == 204
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    assert c.delete(f"/checkpoints/{src}").status_code == 204  # only killed sandboxes had it
    proc.manager.check_invariants()


def test_reaper_runs_gc_every_interval(service):
    clock = FakeClock()
    svc = service("process", clock=clock, gc_interval_s=60, gc_grace_s=0)
    c, m = svc.client, svc.manager
    sid = create(c)
    ck = checkpoint(c, sid)
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    clock.advance(59)
    m.tick()
    assert c.get(f"/checkpoints/{ck['id']}").status_code == 200  # interval not yet up
    clock.advance(1)
    m.tick()
    assert c.get(f"/checkpoints/{ck['id']}").status_code == 404
    assert not keys(svc, "sandbox/")
    other = create(c)
    ck2 = checkpoint(c, other)
    assert c.delete(f"/sandboxes/{other}").status_code == 204
    m.tick()
    assert c.get(f"/checkpoints/{ck2['id']}").status_code == 200  # the interval restarted


@pytest.mark.vm
@pytest.mark.timeout(300)
def test_microvm_pages_of_killed_parent_reclaimed_fork_child_restores(service):
    svc = service("microvm")
    c, m = svc.client, svc.manager
    body = {"memoryMB": 256, "runtime": "microvm"}
    parent = create(c, **body)

    def sh(sid, cmd):  # type: ignore[no-untyped-def]
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd})
        assert r.status_code == 200, r.text
        return r.json()["stdout"]

    sh(parent, "head -c 2000000 /dev/urandom > /tmp/before; md5sum /tmp/before > /tmp/sum")
    r = c.post(f"/sandboxes/{parent}/fork", json={"count": 1})
    assert r.status_code == 201, r.text
    child = r.json()[0]["sandbox"]["sandboxID"]
    fork_ck = c.get(f"/sandboxes/{child}").json()["forked_from"]
    sh(parent, "head -c 3000000 /dev/urandom > /tmp/after")
    later = checkpoint(c, parent)["id"]
    rt = m.runtimes["microvm"]
    later_keys = rt.referenced_keys(m.manifest(later), m.store)
    fork_keys = rt.referenced_keys(m.manifest(fork_ck), m.store)
    only_later = {k for k in later_keys - fork_keys if k.startswith("pagestore/packs/")}
    assert only_later, "the later checkpoint stored pages of its own"

    assert c.delete(f"/sandboxes/{parent}").status_code == 204
    report = gc(c)
    assert report["bytes_freed"] >= 3_000_000, report
    left = keys(svc)
    assert not only_later & left and not any(
        k.startswith(f"checkpoints/{parent}/{later}") for k in left
    )
    assert fork_keys <= left

    expected = sh(child, "cat /tmp/sum")
    sh(child, "rm /tmp/before")
    r = c.post(f"/sandboxes/{child}/restore", json={"checkpoint_id": fork_ck})
    assert r.status_code == 200, r.text
    assert sh(child, "md5sum /tmp/before") == expected
    assert c.post(f"/sandboxes/{child}/pause").status_code == 204
    gc(c)
    assert c.post(f"/sandboxes/{child}/resume", json={}).status_code == 201
    assert sh(child, "md5sum /tmp/before") == expected
    assert c.delete(f"/sandboxes/{child}").status_code == 204
    gc(c)
    assert not any(k.startswith(("pagestore/packs/", "checkpoints/")) for k in keys(svc))


def test_gc_running_alongside_checkpoints_never_breaks_a_restore(proc):
    import threading

    c, m = proc.client, proc.manager
    sid = create(c)
    doomed = create(c)
    write(c, doomed, "x.bin", b"same" * 4096)  # dedups with the survivor's file below
    checkpoint(c, doomed)
    assert c.delete(f"/sandboxes/{doomed}").status_code == 204
    stop = threading.Event()
    runs = []

    def collector() -> None:
        while not stop.is_set():
            runs.append(m.collect_garbage(0))

    t = threading.Thread(target=collector)
    t.start()
    try:
        cks = []
        for i in range(6):
            write(c, sid, "x.bin", b"same" * 4096 if i % 2 else f"v{i}".encode() * 1000)
            cks.append((checkpoint(c, sid)["id"], read(c, sid, "x.bin")))
        for ck, data in cks:
            r = c.post(f"/sandboxes/{sid}/restore", json={"checkpoint_id": ck})
            assert r.status_code == 200, r.text
            assert read(c, sid, "x.bin") == data
    finally:
        stop.set()
        t.join()
    assert len(runs) > 1
    m.check_invariants()
