"""The sandbox service's tables (migrations in ``migrations/versions``).

What lives where: sandbox metadata, the checkpoint graph and templates are rows here; checkpoint
bodies (memory pages, device state, filesystem blobs, manifests) live in the object store under
``sandbox/``. A restarted service rebuilds its view of the world from these rows alone: a paused
sandbox is a row in state ``paused`` whose ``head_checkpoint_id`` names the checkpoint to resume.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db import service_base

Base = service_base()


class SandboxRow(Base):
    """One sandbox, whatever its state. Killed sandboxes keep their row; their checkpoints go at
    the next garbage collection unless a live sandbox's chain (a fork child's) still needs them."""

    __tablename__ = "sandbox_sandboxes"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    template_id: Mapped[str] = mapped_column(String(128))
    runtime: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), index=True)
    """creating | running | paused | killed | error"""
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    timeout_s: Mapped[int] = mapped_column(Integer)
    """Idle timeout; 0 = none. Every use moves ``end_at`` to now + timeout."""
    on_timeout: Mapped[str] = mapped_column(String(8))
    """pause | kill"""
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    env_vars: Mapped[dict[str, Any]] = mapped_column(JSON)
    network: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    """When the sandbox last started running (create, resume, restore)."""
    end_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    head_checkpoint_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """The latest checkpoint of this sandbox's current state: the parent of the next one, and
    what resume restores when paused."""
    forked_from: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Checkpoint this sandbox was forked or restored from, if any."""
    last_snapshot_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """The runtime's :class:`VMHandle` while running, so a restarted service can adopt it."""


class CheckpointRow(Base):
    """One checkpoint: a layer over its parent. The manifest body is in the object store."""

    __tablename__ = "sandbox_checkpoints"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    sandbox_id: Mapped[str] = mapped_column(String(64), index=True)
    parent_id: Mapped[str | None] = mapped_column(
        String(64), ForeignKey("sandbox_checkpoints.id"), nullable=True, index=True
    )
    runtime: Mapped[str] = mapped_column(String(32))
    template_id: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    """manual | pause | periodic | fork"""
    name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    memory: Mapped[bool] = mapped_column(Boolean)
    """Whether the checkpoint holds guest memory (processes continue on restore)."""
    manifest_key: Mapped[str] = mapped_column(String(512))
    bytes_stored: Mapped[int] = mapped_column(BigInteger)
    """Bytes this layer added to the object store (new pages/blobs + manifest)."""
    bytes_total: Mapped[int] = mapped_column(BigInteger)
    """Logical size of the state the checkpoint describes (RAM + disk delta)."""
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    info: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Runtime-specific figures (pages changed, duration), shown as is."""


class TemplateRow(Base):
    """An image template: a base image plus build steps, built by the runtime's image builder."""

    __tablename__ = "sandbox_templates"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    runtime: Mapped[str] = mapped_column(String(32))
    base: Mapped[str | None] = mapped_column(String(128), nullable=True)
    steps: Mapped[list[Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    """building | ready | error"""
    builtin: Mapped[bool] = mapped_column(Boolean, default=False)
    cpu_count: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    spawn_count: Mapped[int] = mapped_column(Integer, default=0)
    logs: Mapped[list[Any]] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    image: Mapped[dict[str, Any]] = mapped_column(JSON)
    """What the runtime's builder returned: where the image lives, its layers."""
