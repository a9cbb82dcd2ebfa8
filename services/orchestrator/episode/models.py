"""The orchestrator's tables: episodes, their trajectory items, their state's step records,
their tool calls."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db import UTCDateTime, service_base
from shared.jobs import JobMixin, utcnow

Base = service_base()


class EpisodeRow(JobMixin, Base):
    """An episode is a job of the shared job model (``shared/jobs.py``: status, owner,
    heartbeat, attempts, progress, result, error; ``payload`` is the episode's request), plus
    what only an episode has: its loop state's latest snapshot (``state``, as of journal tick
    ``state_tick``; the ticks after it are the :class:`StepRow` records), its world and sandbox leases
    and its reward."""

    __tablename__ = "orchestrator_episodes"

    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state_tick: Mapped[int] = mapped_column(Integer, default=0)
    sandbox_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    world_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    resources_released: Mapped[bool] = mapped_column(Boolean, default=False)
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    result_location: Mapped[str | None] = mapped_column(String(512), nullable=True)
    #: the driver that runs it (``episode/driver.py``), picked at submit; null: stored before
    #: drivers were, picked by its harness kind at its next start
    driver: Mapped[str | None] = mapped_column(String(32), nullable=True)

    @property
    def request(self) -> dict[str, Any]:
        return self.payload or {}

    @property
    def cancel_requested(self) -> bool:
        """A cancel is the job's ``cancelled`` status; a running worker stops at its next tick."""
        return self.status == "cancelled"


class TrajectoryItemRow(Base):
    __tablename__ = "orchestrator_trajectory_items"

    episode_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    segment: Mapped[int] = mapped_column(Integer, default=0)
    kind: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)


class StepRow(Base):
    """One tick's record in the episode state's journal: what changed in the state (a delta
    against the tick before) and the last trajectory item the tick appended."""

    __tablename__ = "orchestrator_episode_steps"

    episode_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tick: Mapped[int] = mapped_column(Integer, primary_key=True)
    items_to: Mapped[int] = mapped_column(Integer, default=0)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    delta: Mapped[list[Any]] = mapped_column(JSON)


class ToolCallRow(Base):
    """One side-effecting tool call, keyed by its idempotency key (episode:step:index)."""

    __tablename__ = "orchestrator_tool_calls"

    key: Mapped[str] = mapped_column(String(160), primary_key=True)
    episode_id: Mapped[str] = mapped_column(String(64), index=True)
    tool: Mapped[str] = mapped_column(String(128))
    effect: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))  # started | done
    pre_hash: Mapped[str | None] = mapped_column(String(128), nullable=True)
    observation: Mapped[str | None] = mapped_column(Text, nullable=True)
    is_error: Mapped[bool] = mapped_column(Boolean, default=False)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    runs: Mapped[int] = mapped_column(Integer, default=0)
