"""Slack tables: users, conversations, members, messages, reactions, pins, files, schedules.

Every row is world-scoped (``world_id`` leads the primary key). A message is keyed by
``(channel_id, ts)`` as in Slack; ``ts`` is also unique across the world's channels because
:func:`services.tools.apps.slack.actions.next_ts` hands them out monotonically per world.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.db import Base, WorldScoped


class SlackMeta(WorldScoped, Base):
    """Per-world workspace facts: team, the acting (agent) user, the last ts handed out."""

    __tablename__ = "slack_meta"

    team_id: Mapped[str] = mapped_column(String(32))
    team_name: Mapped[str] = mapped_column(String(128))
    domain: Mapped[str] = mapped_column(String(128))
    agent_user_id: Mapped[str] = mapped_column(String(32))
    last_ts_us: Mapped[int] = mapped_column(BigInteger, default=0)


class SlackUser(WorldScoped, Base):
    __tablename__ = "slack_users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    real_name: Mapped[str] = mapped_column(String(256), default="")
    email: Mapped[str] = mapped_column(String(256), default="")
    title: Mapped[str] = mapped_column(String(256), default="")
    tz: Mapped[str] = mapped_column(String(64), default="UTC")
    is_bot: Mapped[bool] = mapped_column(Boolean, default=False)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)


class SlackChannel(WorldScoped, Base):
    """A conversation: public or private channel, IM (``D…``) or multi-person IM (``G…``)."""

    __tablename__ = "slack_channels"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    kind: Mapped[str] = mapped_column(String(16))  # public | private | im | mpim
    is_archived: Mapped[bool] = mapped_column(Boolean, default=False)
    is_general: Mapped[bool] = mapped_column(Boolean, default=False)
    created: Mapped[int] = mapped_column(BigInteger)
    creator: Mapped[str] = mapped_column(String(32), default="")
    topic: Mapped[str] = mapped_column(Text, default="")
    purpose: Mapped[str] = mapped_column(Text, default="")
    im_user: Mapped[str] = mapped_column(String(32), default="")


class SlackMember(WorldScoped, Base):
    __tablename__ = "slack_members"

    channel_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32), primary_key=True)


class SlackMessage(WorldScoped, Base):
    __tablename__ = "slack_messages"

    channel_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    ts: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(32))
    text: Mapped[str] = mapped_column(Text, default="")
    thread_ts: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    subtype: Mapped[str | None] = mapped_column(String(32), nullable=True)
    edited_ts: Mapped[str | None] = mapped_column(String(32), nullable=True)
    edited_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    blocks: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    file_ids: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)


class SlackReaction(WorldScoped, Base):
    __tablename__ = "slack_reactions"

    channel_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    ts: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)


class SlackPin(WorldScoped, Base):
    __tablename__ = "slack_pins"

    channel_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    ts: Mapped[str] = mapped_column(String(32), primary_key=True)
    pinned_by: Mapped[str] = mapped_column(String(32))
    created: Mapped[int] = mapped_column(BigInteger)


class SlackFile(WorldScoped, Base):
    """An uploaded file; ``status`` is ``pending`` between getUploadURLExternal and complete."""

    __tablename__ = "slack_files"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(512))
    title: Mapped[str] = mapped_column(String(512), default="")
    mimetype: Mapped[str] = mapped_column(String(128), default="application/octet-stream")
    user: Mapped[str] = mapped_column(String(32))
    created: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(Integer, default=0)
    content: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    channels: Mapped[list[str]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), default="complete")


class SlackScheduled(WorldScoped, Base):
    """A message waiting for ``post_at`` on the world clock (``chat.scheduleMessage``)."""

    __tablename__ = "slack_scheduled"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    channel_id: Mapped[str] = mapped_column(String(32))
    user: Mapped[str] = mapped_column(String(32))
    post_at: Mapped[int] = mapped_column(BigInteger, index=True)
    text: Mapped[str] = mapped_column(Text, default="")
    thread_ts: Mapped[str | None] = mapped_column(String(32), nullable=True)
    blocks: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
