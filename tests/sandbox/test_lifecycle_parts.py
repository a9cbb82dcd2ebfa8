"""Each part of the lifecycle on its own, wired by hand over an in-memory runtime (no HTTP).

The state and its transitions, the lifecycle (create, pause, resume, kill), the checkpoint
graph and restore, fork and the guest-call bounds each get their own checks here; the facade
and the routes are covered by ``test_lifecycle.py`` and the API tests. Plus the layering rule:
the domain imports nothing from ``api/`` and reads no settings itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from services.sandbox.lifecycle.checkpoints import CheckpointGraph
from services.sandbox.lifecycle.errors import Conflict, Internal, Invalid, NotFound, SandboxError
from services.sandbox.lifecycle.fork import Forker
from services.sandbox.lifecycle.gc import GarbageCollector
from services.sandbox.lifecycle.guest import GuestOps
from services.sandbox.lifecycle.sandboxes import SandboxLifecycle
from services.sandbox.lifecycle.state import SandboxState
from services.sandbox.lifecycle.templates import TemplateCatalog
from services.sandbox.models import SandboxRow
from shared.contracts.sandbox import ExecBody, NetworkPolicy, NewSandbox
from shared.db import ServiceDatabase
from shared.objectstore import LocalObjectStore
from shared.settings import load_settings
from tests.sandbox.test_lifecycle import MemoryRuntime

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "services" / "sandbox"


class Parts:
    def __init__(self, tmp: Path, deployed: bool = False) -> None:
        settings = load_settings(data_dir=tmp, sandbox={"runtime": "microvm", "max_fork_count": 4})
        self.db = ServiceDatabase("sandbox", settings.database_url or "", SANDBOX / "migrations")
        self.db.migrate()
        self.rt = MemoryRuntime()
        runtimes = {"microvm": self.rt}
        sb = settings.sandbox
        store = LocalObjectStore(tmp / "store")
        self.st = SandboxState(settings=sb, data_dir=tmp / "sandbox", db=self.db, store=store,
                               runtimes=runtimes, clock=lambda: _now())  # fmt: skip
        self.gc = GarbageCollector(settings=sb, data_dir=tmp / "sandbox", db=self.db, store=store,
                                   runtimes=runtimes, is_live=lambda i: i in self.st.live)  # fmt: skip
        self.templates = TemplateCatalog(db=self.db, runtimes=runtimes, default_runtime="microvm",
                                         clock=_now)  # fmt: skip
        self.templates.seed()
        self.graph = CheckpointGraph(self.st, self.gc)
        self.life = SandboxLifecycle(self.st, self.graph, self.gc, self.templates, deployed)
        self.forker = Forker(self.st, self.graph, self.gc)
        self.guest = GuestOps(self.st)

    def new(self) -> str:
        return self.life.create(NewSandbox(templateID="busybox", timeout=0)).sandboxID

    def run(self, sid: str, *argv: str) -> str:
        return self.guest.exec(sid, ExecBody(argv=list(argv))).stdout

    def close(self) -> None:
        self.templates.close()
        self.db.close()


def _now():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def parts(tmp_path):  # type: ignore[no-untyped-def]
    p = Parts(tmp_path)
    yield p
    p.close()


def test_lifecycle_pause_resume_kill_keep_the_live_set_and_rows_in_step(parts):
    sid = parts.new()
    assert sid in parts.st.live
    parts.run(sid, "set", "k", "v")
    ck = parts.life.pause(sid)
    assert sid not in parts.st.live and parts.life.get(sid).head_checkpoint_id == ck.id
    with pytest.raises(Conflict, match="not running"):
        parts.life.pause(sid)
    with pytest.raises(Conflict) as exc:
        parts.guest.exec(sid, ExecBody(argv=["get", "k"]))
    assert exc.value.error_code == "sandbox_paused"
    parts.life.resume(sid)
    assert parts.run(sid, "get", "k") == "v"
    with pytest.raises(Conflict, match="running"):
        parts.life.resume(sid)
    parts.life.kill(sid)
    assert sid not in parts.st.live
    with pytest.raises(NotFound, match="killed"):
        parts.life.get(sid)


def test_state_marks_a_lost_sandbox_paused_at_its_head_or_error(parts):
    with_head, without = parts.new(), parts.new()
    parts.graph.checkpoint(with_head)
    parts.st.lose(with_head, "the VM exited")
    parts.st.lose(without, "the VM exited")
    a, b = parts.life.get(with_head), parts.life.get(without)
    assert a.state == "paused" and "later changes are lost" in (a.error or "")
    assert b.state == "error" and "no checkpoint to recover from" in (b.error or "")
    assert not parts.st.live and parts.rt.vms == {}  # stopped, nothing left running


def test_checkpoint_graph_lineage_history_and_restore(parts):
    sid = parts.new()
    parts.run(sid, "set", "n", "1")
    first = parts.graph.checkpoint(sid, "one")
    parts.run(sid, "set", "n", "2")
    second = parts.graph.checkpoint(sid)
    assert [c.id for c in parts.graph.lineage(second.id)] == [first.id, second.id]
    assert [c.id for c in parts.graph.sandbox_lineage(sid)] == [first.id, second.id]
    assert parts.graph.get(first.id).name == "one"
    parts.graph.restore(sid, first.id)
    assert parts.run(sid, "get", "n") == "1" and parts.life.get(sid).head_checkpoint_id == first.id
    other = parts.new()
    assert not parts.graph.in_history(other, first.id)
    with pytest.raises(Conflict, match="not in the history"):
        parts.graph.restore(other, first.id)
    with pytest.raises(NotFound):
        parts.graph.lineage("nope")
    parts.st.store.delete(f"sandbox/manifests/{second.id}.json")
    with pytest.raises(Internal, match="is gone"):
        parts.graph.manifest(second.id)


def test_fork_children_copy_the_source_and_a_failed_child_is_marked(parts):
    sid = parts.new()
    parts.run(sid, "set", "k", "src")
    with pytest.raises(Invalid, match="MAX_FORK_COUNT"):
        parts.forker.fork(sid, 5)
    original = parts.rt.restore
    calls = iter(range(100))

    def flaky(child, chain, store, workdir):  # type: ignore[no-untyped-def]
        if next(calls) == 0:
            parts.rt.fail_restores.add(child)
        return original(child, chain, store, workdir)

    parts.rt.restore = flaky  # type: ignore[method-assign]
    out = parts.forker.fork(sid, 3)
    failed = [x for x in out if isinstance(x, SandboxError)]
    ok = [x for x in out if not isinstance(x, SandboxError)]
    assert len(failed) == 1 and len(ok) == 2
    assert [parts.run(x.sandboxID, "get", "k") for x in ok] == ["src", "src"]
    with parts.db.session() as s:
        states = sorted(s.get(SandboxRow, x.sandboxID).state for x in ok)
        assert states == ["running", "running"]
        assert [r.state for r in s.query(SandboxRow).filter_by(state="error")] == ["error"]
    assert sid in parts.st.live  # the source keeps running


def test_guest_call_bounds(parts):
    limit = parts.st.settings.exec_max_timeout_s
    assert parts.guest.exec_request(ExecBody(cmd="true", timeout_s=0)).timeout_s == limit
    assert parts.guest.exec_request(ExecBody(cmd="true")).timeout_s == min(60, limit)
    with pytest.raises(Invalid, match="EXEC_MAX_TIMEOUT_S"):
        parts.guest.exec_request(ExecBody(cmd="true", timeout_s=limit + 1))
    with pytest.raises(Invalid) as exc:
        parts.guest.read_file(parts.new(), "/../etc/passwd")
    assert exc.value.error_code == "invalid_path"


def test_deployed_mode_fences_the_process_runtime(tmp_path):
    p = Parts(tmp_path, deployed=True)
    try:
        with pytest.raises(Conflict, match="not a security boundary"):
            p.life._fence("process", NetworkPolicy())
        p.life._fence("microvm", NetworkPolicy())  # a VM runtime is fine
    finally:
        p.close()


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_the_domain_imports_nothing_from_the_api_layer():
    """Only ``api/`` and the app factory that wires it may import ``services.sandbox.api``."""
    offenders = []
    for path in SANDBOX.rglob("*.py"):
        rel = path.relative_to(SANDBOX).as_posix()
        if rel.startswith("api/") or rel == "app.py":
            continue
        if any(m == "services.sandbox.api" or m.startswith("services.sandbox.api.")
               for m in _imports(path)):  # fmt: skip
            offenders.append(rel)
    assert offenders == []


def test_lifecycle_and_these_runtimes_read_no_settings_themselves():
    """Settings are passed in by the app factory; the parts never load them."""
    parts = [*(SANDBOX / "lifecycle").glob("*.py"), SANDBOX / "runtime" / "firecracker.py",
             *(SANDBOX / "runtime" / "process").glob("*.py"), *(SANDBOX / "pagestore").glob("*.py")]  # fmt: skip
    readers = [
        p.relative_to(SANDBOX).as_posix()
        for p in parts
        if "get_settings" in p.read_text() or "load_settings" in p.read_text()
    ]
    assert readers == []


def test_runtimes_come_from_one_registry(tmp_path):
    """Every runtime a request may name is in ``RUNTIMES`` and built from it; none is loaded
    by module name or probed for a factory."""
    from services.sandbox.lifecycle.runtimes import RUNTIME_ORDER, RUNTIMES, make_runtimes
    from services.sandbox.runtime.base import Runtime

    assert set(RUNTIMES) == set(RUNTIME_ORDER)
    built = make_runtimes(load_settings(data_dir=tmp_path))
    assert list(built) == list(RUNTIMES)
    assert all(isinstance(rt, Runtime) for rt in built.values())
    text = (SANDBOX / "lifecycle" / "runtimes.py").read_text()
    assert "importlib" not in text and "getattr(" not in text
