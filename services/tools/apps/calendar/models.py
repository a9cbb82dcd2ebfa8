"""Calendar tables: calendars and events, world-scoped.

An event lives in its organizer's calendar only; an attendee sees it in their own calendar
through their attendee entry (as Google shows invitations), so a response status has one home.
Times are kept both as the API's ``start`` / ``end`` objects and as UTC instants for queries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.db import Base, WorldScoped


class CalendarMeta(WorldScoped, Base):
    """Who the agent is on Calendar (its primary calendar's id is its email)."""

    __tablename__ = "calendar_meta"

    agent_email: Mapped[str] = mapped_column(String(256))
    seq: Mapped[int] = mapped_column(Integer, default=0)


class CalendarRow(WorldScoped, Base):
    __tablename__ = "calendar_calendars"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    summary: Mapped[str] = mapped_column(String(512))
    description: Mapped[str] = mapped_column(Text, default="")
    time_zone: Mapped[str] = mapped_column(String(64), default="UTC")
    owner_email: Mapped[str] = mapped_column(String(256))
    owner_name: Mapped[str] = mapped_column(String(256), default="")
    primary: Mapped[bool] = mapped_column(Boolean, default=False)
    in_list: Mapped[bool] = mapped_column(Boolean, default=True)
    color_id: Mapped[str] = mapped_column(String(8), default="1")
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)


class CalendarEvent(WorldScoped, Base):
    __tablename__ = "calendar_events"

    id: Mapped[str] = mapped_column(String(1024), primary_key=True)
    calendar_id: Mapped[str] = mapped_column(String(256), index=True)
    status: Mapped[str] = mapped_column(String(16), default="confirmed")
    summary: Mapped[str] = mapped_column(Text, default="")
    description: Mapped[str] = mapped_column(Text, default="")
    location: Mapped[str] = mapped_column(Text, default="")
    start: Mapped[dict[str, Any]] = mapped_column(JSON)
    end: Mapped[dict[str, Any]] = mapped_column(JSON)
    start_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    end_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    attendees: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    organizer_email: Mapped[str] = mapped_column(String(256))
    creator_email: Mapped[str] = mapped_column(String(256))
    recurrence: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    sequence: Mapped[int] = mapped_column(Integer, default=0)
    seq: Mapped[int] = mapped_column(Integer)
