"""Rows and runtime records as the service's contract shows them (``shared.contracts.sandbox``).

Pure mapping, no state: SQL rows to aware UTC datetimes, sandbox rows to ``Sandbox`` and
``SandboxDetail``, checkpoint rows to ``Checkpoint``, guest file records to ``EntryInfo`` and
the runtime set to ``RuntimeInfo``. The contract models are shared with the clients, not the
API layer's, so the domain depends on nothing in ``api/``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from services.sandbox.lifecycle.runtimes import RUNTIME_ORDER, pick_runtime
from services.sandbox.models import CheckpointRow, SandboxRow
from services.sandbox.runtime.base import (
    FileInfo,
    NetworkPolicy,
    Runtime,
    RuntimeUnavailable,
    SandboxSpec,
)
from shared.contracts.sandbox import (
    NEVER,
    Checkpoint,
    EntryInfo,
    Lifecycle,
    RuntimeInfo,
    Sandbox,
    SandboxDetail,
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything here is UTC."""
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def summary(row: SandboxRow) -> Sandbox:
    return Sandbox(
        templateID=row.template_id,
        sandboxID=row.id,
        runtime=row.runtime,
        state=row.state,  # type: ignore[arg-type]
    )


def guest_addresses(rt: Runtime | None, network: dict | None) -> dict[str, str]:
    """The runtime's guest-side address of each allowed destination (a pure function of the
    allowlist, so it is the same after pause, resume and fork)."""
    mapping = getattr(rt, "guest_addresses", None)
    if mapping is None or not network or network.get("mode") != "allowlist":
        return {}
    return mapping(SandboxSpec(network=NetworkPolicy.model_validate(network)))


def detail(
    row: SandboxRow, rt: Runtime | None, live_end_at: datetime | None, live: bool
) -> SandboxDetail:
    """``live_end_at``: the running sandbox's in-memory deadline (use moves it, SQL lags)."""
    end_at = live_end_at if live else aware(row.end_at)
    return SandboxDetail(
        templateID=row.template_id,
        sandboxID=row.id,
        runtime=row.runtime,
        state=row.state,  # type: ignore[arg-type]
        startedAt=aware(row.started_at),  # type: ignore[arg-type]
        endAt=(end_at or NEVER) if row.state == "running" else aware(row.updated_at),  # type: ignore[arg-type]
        cpuCount=row.cpu_count,
        memoryMB=row.memory_mb,
        metadata=row.metadata_ or {},
        network=row.network or {},  # type: ignore[arg-type]
        guest_addresses=guest_addresses(rt, row.network),
        lifecycle=Lifecycle(onTimeout=row.on_timeout),  # type: ignore[arg-type]
        timeout_s=row.timeout_s,
        memory_checkpoint=bool(rt and rt.capabilities.memory_checkpoint),
        head_checkpoint_id=row.head_checkpoint_id,
        forked_from=row.forked_from,
        error=row.error,
    )


def checkpoint_view(row: CheckpointRow) -> Checkpoint:
    return Checkpoint(
        id=row.id,
        sandbox_id=row.sandbox_id,
        parent_id=row.parent_id,
        kind=row.kind,  # type: ignore[arg-type]
        name=row.name,
        runtime=row.runtime,
        template_id=row.template_id,
        memory=row.memory,
        created_at=aware(row.created_at),  # type: ignore[arg-type]
        bytes_stored=row.bytes_stored,
        cpu_count=row.cpu_count,
        memory_mb=row.memory_mb,
        info=row.info or {},
    )


def entry(info: FileInfo) -> EntryInfo:
    kind = "symlink" if info.is_symlink else "dir" if info.is_dir else "file"
    return EntryInfo(
        name=info.name, path=info.path, type=kind, size=info.size, mode=info.mode,
        modified_time=datetime.fromtimestamp(info.mtime, UTC),
    )  # fmt: skip


def runtime_infos(default_setting: str, runtimes: dict[str, Runtime]) -> list[RuntimeInfo]:
    """Every runtime the code knows, installed or not, with what it can do here."""
    try:
        default = pick_runtime(None, default_setting, runtimes).name
    except RuntimeUnavailable:
        default = None
    out = []
    for name in RUNTIME_ORDER:
        rt = runtimes.get(name)
        if rt is None:
            out.append(
                RuntimeInfo(
                    name=name, available=False, reason="runtime not installed",
                    memory_checkpoint=name != "process", fork=name != "process",
                    network_allowlist=name != "process", default=False,
                )
            )  # fmt: skip
            continue
        ok, why = rt.available()
        caps = rt.capabilities
        out.append(
            RuntimeInfo(
                name=name, available=ok, reason=why, memory_checkpoint=caps.memory_checkpoint,
                fork=caps.fork, network_allowlist=caps.network_allowlist,
                default=name == default,
            )
        )  # fmt: skip
    return out
