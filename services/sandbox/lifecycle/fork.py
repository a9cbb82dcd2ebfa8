"""Fork: one checkpoint of the source, then N restores into new sandboxes.

A running source is checkpointed in place and keeps running; a paused one forks from its head
checkpoint untouched. The checkpoint is held against garbage collection until the children's
rows name it (the source may be killed meanwhile). Children are restored in parallel and each
is reported on its own: a child that fails to restore is marked ``error`` and returned as its
error, the others still run.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from concurrent.futures import ThreadPoolExecutor

from services.sandbox.lifecycle.checkpoints import CheckpointGraph
from services.sandbox.lifecycle.errors import (
    Conflict,
    Internal,
    Invalid,
    SandboxError,
    runtime_errors,
)
from services.sandbox.lifecycle.gc import GarbageCollector
from services.sandbox.lifecycle.state import SandboxState
from services.sandbox.models import SandboxRow
from services.sandbox.runtime.base import CheckpointManifest, Runtime
from shared.contracts.sandbox import Sandbox

log = logging.getLogger("k3stack.sandbox")


class Forker:
    """``fork(sandbox_id, count)`` over the shared state, the checkpoint graph and the GC."""

    def __init__(self, state: SandboxState, graph: CheckpointGraph, gc: GarbageCollector) -> None:
        self.st = state
        self.graph = graph
        self.gc = gc

    def fork(
        self, sandbox_id: str, count: int, timeout: int | None = None, memory: bool = True
    ) -> list[Sandbox | SandboxError]:
        """One entry per child: the running child, or the error that stopped it."""
        st = self.st
        limit = st.settings.max_fork_count
        if count > limit:
            raise Invalid("invalid_request",
                f"count {count} is above the limit of {limit} (K3STACK_SANDBOX__MAX_FORK_COUNT)",
            )  # fmt: skip
        with st.lock(sandbox_id):
            with st.db.session() as s:
                src = st.row(s, sandbox_id)
                state, runtime_name = src.state, src.runtime
                head = src.head_checkpoint_id
            rt = st.runtime(runtime_name)
            if memory and not rt.capabilities.memory_checkpoint:
                raise Conflict("unsupported",
                    f"runtime {rt.name!r} cannot fork memory: its checkpoints hold files only "
                    "(pass memory=false to fork the filesystem)",
                )  # fmt: skip
            if not rt.capabilities.fork:
                raise Conflict("unsupported", f"runtime {rt.name!r} cannot fork")
            if state == "running":
                ck_id = self.graph.take(sandbox_id, "fork").id
            elif state == "paused" and head:
                ck_id = head  # a paused sandbox's state is its head checkpoint: no need to touch it
            else:
                raise Conflict("not_running", f"sandbox {sandbox_id!r} is {state}")
            self.gc.hold([ck_id])  # until the children's rows name it (the source may be killed)
        try:
            chain, children = self._child_rows(sandbox_id, ck_id, count, timeout)
        finally:
            self.gc.release([ck_id])
        with ThreadPoolExecutor(min(count, 4), thread_name_prefix="k3stack-fork") as pool:
            return list(pool.map(lambda child: self._start_child(child, chain, rt), children))

    def _start_child(
        self, child_id: str, chain: list[CheckpointManifest], rt: Runtime
    ) -> Sandbox | SandboxError:
        st = self.st
        try:
            with st.lock(child_id):
                with runtime_errors(child_id), self.gc.gate.shared():
                    handle = rt.restore(child_id, chain, st.store, st.workdir(child_id))
                return st.went_running(child_id, handle, rt)
        except SandboxError as exc:
            st.set_error(child_id, exc.message)
            shutil.rmtree(st.workdir(child_id), ignore_errors=True)
            return exc
        except Exception as exc:  # noqa: BLE001 - one child's failure is reported, not raised
            log.exception("fork child %s", child_id)
            st.set_error(child_id, str(exc))
            return Internal("runtime_error", str(exc))

    def _child_rows(
        self, sandbox_id: str, ck_id: str, count: int, timeout: int | None
    ) -> tuple[list[CheckpointManifest], list[str]]:
        """The fork checkpoint's chain and ``count`` new child rows (state ``creating``)."""
        st = self.st
        chain = self.graph.chain(ck_id)
        with st.db.session() as s:
            src = st.row(s, sandbox_id)
            children = []
            now = st.clock()
            for _ in range(count):
                child_id = f"sbx-{secrets.token_hex(8)}"
                children.append(child_id)
                s.add(
                    SandboxRow(
                        id=child_id, template_id=src.template_id, runtime=src.runtime,
                        state="creating", cpu_count=src.cpu_count, memory_mb=src.memory_mb,
                        timeout_s=src.timeout_s if timeout is None else timeout,
                        on_timeout=src.on_timeout, metadata_=dict(src.metadata_ or {}),
                        env_vars=dict(src.env_vars or {}), network=dict(src.network or {}),
                        created_at=now, started_at=now, end_at=None, updated_at=now,
                        head_checkpoint_id=ck_id, forked_from=ck_id,
                    )
                )  # fmt: skip
        return chain, children
