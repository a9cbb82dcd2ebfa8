"""The rollout tables: a batch, its samples (each a job of the shared job model, so the claim,
heartbeat and reaper are ``shared/jobs.py``'s), the per-task forked setups, and the token
records of every assistant segment (stored once, here; exports read them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from services.orchestrator.episode.models import Base
from shared.db import UTCDateTime
from shared.jobs import JobMixin, utcnow


class RolloutRow(Base):
    """A batch: its request, the current iteration and the policy serving it."""

    __tablename__ = "orchestrator_rollouts"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    iteration: Mapped[int] = mapped_column(Integer, default=1)
    #: {"base_url", "model", "version", "lam"} of the current iteration
    policy: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: the iteration whose λ was reached: its live samples pause at their next tick
    pause_iteration: Mapped[int] = mapped_column(Integer, default=0)
    history: Mapped[list[Any]] = mapped_column(JSON, default=list)


class SampleRow(JobMixin, Base):
    """One sample (task i, draw k). The job status is the current run's; ``phase`` is the
    sample's own: pending, live, paused, finished, cut (over its effort budget), failed,
    cancelled."""

    __tablename__ = "orchestrator_rollout_samples"

    rollout_id: Mapped[str] = mapped_column(String(64), index=True)
    task_index: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(16), default="pending")
    iteration: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    sandbox_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    world_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    world_token: Mapped[str | None] = mapped_column(String(128), nullable=True)
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: what was saved at the last pause: world snapshot id + hash, sandbox files digest
    paused: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: the driver that runs it (``episode/driver.py``); null: stored before drivers were
    driver: Mapped[str | None] = mapped_column(String(32), nullable=True)


class SetupRow(Base):
    """The one base setup (world + sandbox) a task's K samples fork from."""

    __tablename__ = "orchestrator_rollout_setups"

    rollout_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))  # creating | ready | failed
    owner: Mapped[str] = mapped_column(String(200))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    world_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    world_token: Mapped[str | None] = mapped_column(String(128), nullable=True)
    sandbox_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    setup_s: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class SegmentRow(Base):
    """One assistant segment, token in and token out. ``prompt_ids`` holds only what was added
    to the context since the previous segment (the new observation tokens), so every id is
    stored once; the full prompt is the concatenation of earlier rows' prompt + completion."""

    __tablename__ = "orchestrator_rollout_segments"

    sample_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    prompt_ids: Mapped[list[int]] = mapped_column(JSON)
    completion_ids: Mapped[list[int]] = mapped_column(JSON)
    logprobs: Mapped[list[float | None]] = mapped_column(JSON)  # null: none given
    version: Mapped[str] = mapped_column(String(128))
    iteration: Mapped[int] = mapped_column(Integer)
    finish_reason: Mapped[str] = mapped_column(String(32))
