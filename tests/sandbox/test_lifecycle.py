"""SandboxManager policy against an in-memory runtime that has memory checkpoints.

``MemoryRuntime`` keeps each sandbox's "memory" as a dict and its checkpoints as manifests
carrying a copy, so the manager's lineage, fork and failure handling can be tested without a
VM: a fork whose child fails to restore reports that child's error and still returns the
others, and the source keeps running.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.sandbox.runtime.base import (
    CheckpointError,
    CheckpointManifest,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileInfo,
    GuestFileNotFound,
    Runtime,
    RuntimeCapabilities,
    SandboxSpec,
    VMHandle,
)
from shared.settings import load_settings


class MemoryRuntime(Runtime):
    name = "microvm"  # stands in for the memory-capable runtime
    capabilities = RuntimeCapabilities(memory_checkpoint=True, fork=True, network_allowlist=True)

    def __init__(self) -> None:
        self.vms: dict[str, dict[str, str]] = {}
        self.fail_restores: set[str] = set()
        self.ids = itertools.count()

    def available(self):  # type: ignore[no-untyped-def]
        return True, "in-memory test runtime"

    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        self.vms[sandbox_id] = {}
        return VMHandle(sandbox_id=sandbox_id, runtime=self.name, workdir=workdir, spec=spec)

    def checkpoint(self, h, parent, store):  # type: ignore[no-untyped-def]
        return CheckpointManifest(
            id=f"ck{next(self.ids)}", parent_id=parent.id if parent else None,
            sandbox_id=h.sandbox_id, runtime=self.name, spec=h.spec,
            runtime_data={"memory": dict(self.vms[h.sandbox_id])},
        )  # fmt: skip

    def stop(self, h):  # type: ignore[no-untyped-def]
        self.vms.pop(h.sandbox_id, None)

    def restore(self, sandbox_id, chain, store, workdir):  # type: ignore[no-untyped-def]
        if sandbox_id in self.fail_restores:
            raise CheckpointError(f"injected restore failure for {sandbox_id}")
        self.vms[sandbox_id] = dict(chain[-1].runtime_data["memory"])
        return VMHandle(sandbox_id=sandbox_id, runtime=self.name, workdir=workdir,
                        spec=chain[-1].spec, restored_from=chain[-1].id)  # fmt: skip

    def destroy(self, h):  # type: ignore[no-untyped-def]
        self.stop(h)

    def is_alive(self, h):  # type: ignore[no-untyped-def]
        return h.sandbox_id in self.vms

    def exec(self, h, req: ExecRequest) -> ExecResult:  # "set k v" / "get k"
        mem = self.vms[h.sandbox_id]
        op, key, *val = req.full_argv()
        if op == "set":
            mem[key] = val[0]
            return ExecResult(exit_code=0)
        return ExecResult(exit_code=0, stdout=mem.get(key, ""))

    def exec_stream(self, h, req):  # type: ignore[no-untyped-def]
        res = self.exec(h, req)
        yield ExecEvent(kind="start", pid=1)
        yield ExecEvent(kind="stdout", data=res.stdout)
        yield ExecEvent(kind="exit", exit_code=0)

    def kill_process(self, h, pid, signal=15):  # type: ignore[no-untyped-def]
        pass

    def read_file(self, h, path):  # type: ignore[no-untyped-def]
        raise GuestFileNotFound(path)

    def write_file(self, h, path, data, mode=0o644):  # type: ignore[no-untyped-def]
        return FileInfo(path=path, name=path, size=len(data), mode=mode, is_dir=False, mtime=0)

    def list_dir(self, h, path):  # type: ignore[no-untyped-def]
        return []

    def stat(self, h, path):  # type: ignore[no-untyped-def]
        raise GuestFileNotFound(path)

    def remove(self, h, path, recursive=False):  # type: ignore[no-untyped-def]
        pass


@pytest.fixture
def mem(tmp_path):  # type: ignore[no-untyped-def]
    from services.sandbox.app import create_app

    rt = MemoryRuntime()
    settings = load_settings(data_dir=tmp_path, sandbox={"runtime": "microvm"})
    with TestClient(create_app(settings, runtimes={"microvm": rt}, background=False)) as c:
        yield c, rt


def run(c, sid, *argv):  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/exec", json={"argv": list(argv)})
    assert r.status_code == 200, r.text
    return r.json()["stdout"]


def test_fork_reports_each_child_and_source_keeps_running(mem):  # type: ignore[no-untyped-def]
    c, rt = mem
    sid = c.post("/sandboxes", json={"timeout": 0}).json()["sandboxID"]
    run(c, sid, "set", "count", "41")
    original_restore = rt.restore
    calls = itertools.count()

    def flaky(sandbox_id, chain, store, workdir):  # type: ignore[no-untyped-def]
        if next(calls) == 1:
            rt.fail_restores.add(sandbox_id)
        return original_restore(sandbox_id, chain, store, workdir)

    rt.restore = flaky  # type: ignore[method-assign]
    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 3})
    assert r.status_code == 201
    results = r.json()
    assert len(results) == 3
    assert all((x["sandbox"] is None) != (x["error"] is None) for x in results)
    failed = [x for x in results if x["error"]]
    assert len(failed) == 1 and "injected restore failure" in failed[0]["error"]["message"]
    assert failed[0]["error"]["code"] == 500
    for x in results:
        if x["sandbox"]:
            kid = x["sandbox"]["sandboxID"]
            assert run(c, kid, "get", "count") == "41"
            run(c, kid, "set", "count", kid)
    assert run(c, sid, "get", "count") == "41"
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "running"
    c.app.state.manager.check_invariants()


def test_lineage_crosses_forks_and_restore_checks_history(mem):  # type: ignore[no-untyped-def]
    c, _ = mem
    sid = c.post("/sandboxes", json={"timeout": 0}).json()["sandboxID"]
    a = c.post(f"/sandboxes/{sid}/checkpoints").json()["id"]
    kid = c.post(f"/sandboxes/{sid}/fork", json={"count": 1}).json()[0]["sandbox"]["sandboxID"]
    b = c.post(f"/sandboxes/{kid}/checkpoints").json()
    chain = [x["id"] for x in c.get(f"/checkpoints/{b['id']}/lineage").json()]
    assert chain[0] == a and chain[-1] == b["id"] and len(chain) == 3
    assert c.post(f"/sandboxes/{kid}/restore", json={"checkpoint_id": a}).status_code == 200
    other = c.post("/sandboxes", json={"timeout": 0}).json()["sandboxID"]
    r = c.post(f"/sandboxes/{other}/restore", json={"checkpoint_id": b["id"]})
    assert r.status_code == 409 and "not in the history" in r.json()["message"]
    assert c.post(f"/sandboxes/{sid}/fork", json={"count": 1000}).status_code == 400
    assert c.get("/checkpoints/nope").status_code == 404


def test_fork_of_paused_sandbox_uses_its_head(mem):  # type: ignore[no-untyped-def]
    c, rt = mem
    sid = c.post("/sandboxes", json={"timeout": 0}).json()["sandboxID"]
    run(c, sid, "set", "k", "v")
    c.post(f"/sandboxes/{sid}/pause")
    res = c.post(f"/sandboxes/{sid}/fork", json={"count": 2}).json()
    assert [run(c, x["sandbox"]["sandboxID"], "get", "k") for x in res] == ["v", "v"]
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "paused"
