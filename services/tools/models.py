"""Tables the tools service core owns: worlds and the per-world action log.

Apps keep their tables in ``services/tools/apps/<app>/models.py`` (see ``apps/README.md``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.db import Base, WorldScoped


class WorldRow(Base):
    __tablename__ = "tools_worlds"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    scenario: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    token_sha256: Mapped[str] = mapped_column(String(64), index=True)
    clock: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    id_counter: Mapped[int] = mapped_column(Integer, default=0)


class ActionRow(WorldScoped, Base):
    """What the agent (or an NPC) did, in order: triggers for events, evidence for checks."""

    __tablename__ = "tools_actions"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(128))
    app: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
