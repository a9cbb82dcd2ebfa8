"""Canvas tables: one row per Canvas object, world-scoped.

Canvas's objects (users, courses, enrollments, modules and their items, assignments,
submissions, discussion topics, conversations, calendar events) share one shape here: an
integer id unique per world (Canvas ids are integers, one sequence per instance), a ``kind``,
the course it belongs to, and its API fields as JSON. One table keeps forks and exports generic
and lets every list route page by id the way Canvas does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.db import Base, WorldScoped


class CanvasMeta(WorldScoped, Base):
    """Who the agent is on Canvas (the token's ``self``) and the world's id sequence."""

    __tablename__ = "canvas_meta"

    agent_id: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer, default=0)


class CanvasObject(WorldScoped, Base):
    __tablename__ = "canvas_objects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    course_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
