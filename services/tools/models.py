"""Tables the tools service core owns: worlds, the action log, events, checks, snapshots.

Apps keep their tables in ``services/tools/apps/<app>/models.py`` (see ``apps/README.md``).
Every core table that belongs to one world mixes in :class:`WorldScoped`, so snapshot, restore
and fork carry it with the apps' tables; snapshots themselves are not world-scoped (a snapshot
of a world must not contain that world's snapshots).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.tables import Base, WorldScoped


class WorldRow(Base):
    __tablename__ = "tools_worlds"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    scenario: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    token_sha256: Mapped[str] = mapped_column(String(64), index=True)
    clock: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    id_counter: Mapped[int] = mapped_column(Integer, default=0)
    # Where the world started (reset goes back to it) and how far triggers have read the log.
    initial_snapshot_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    actions_scanned: Mapped[int] = mapped_column(Integer, default=0)
    parent_id: Mapped[str | None] = mapped_column(String(64), nullable=True)


class ActionRow(WorldScoped, Base):
    """What the agent (or an NPC) did, in order: triggers for events, evidence for checks."""

    __tablename__ = "tools_actions"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(128))
    app: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)


class EventRow(WorldScoped, Base):
    """One scheduled or triggered event of the world's scenario, and whether it has fired.

    ``spec`` is the event as the scenario declared it (effects, trigger, checks), copied in at
    creation so a world is self-contained: forks and snapshots carry their pending events.
    """

    __tablename__ = "tools_events"

    event_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # waiting | due | fired
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    trigger_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)


class CheckResultRow(WorldScoped, Base):
    """A check evaluated at its declared time (``at``); later state cannot change the verdict."""

    __tablename__ = "tools_check_results"

    check_id: Mapped[str] = mapped_column(String(160), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(128))
    evaluated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    passed: Mapped[bool] = mapped_column(Boolean)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class RowMarkRow(WorldScoped, Base):
    """The digest each app row would have if only the scenario had acted (no agent).

    Written for every row at creation and re-written for rows an event changes; comparing the
    live rows with these marks gives exactly what the agent changed (collateral-damage checks).
    """

    __tablename__ = "tools_row_marks"

    tbl: Mapped[str] = mapped_column(String(64), primary_key=True)
    pk: Mapped[str] = mapped_column(String(512), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))


class SnapshotRow(Base):
    """A world's full state at one moment, as compressed canonical JSON (see ``worlds.store``):
    inline in ``data`` when small, else content-addressed in the object store (``object_key``),
    where identical states (e.g. every same-seed world's initial state) are stored once."""

    __tablename__ = "tools_snapshots"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    origin_world: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    clock: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    label: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state_hash: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    object_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
