"""Notion tables: users, pages, databases, blocks and comments, all world-scoped.

Values are kept in the API's own JSON shapes (property values, rich text, block payloads), so
reads render without translation. ``seq`` is the world-wide creation order (ties broken by it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.db import Base, WorldScoped


class NotionMeta(WorldScoped, Base):
    """Per-world workspace facts: its name, the integration's bot user, the creation counter."""

    __tablename__ = "notion_meta"

    workspace_name: Mapped[str] = mapped_column(String(256))
    bot_user_id: Mapped[str] = mapped_column(String(36))
    seq: Mapped[int] = mapped_column(Integer, default=0)


class NotionUser(WorldScoped, Base):
    __tablename__ = "notion_users"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))  # person | bot
    name: Mapped[str] = mapped_column(String(256))
    email: Mapped[str] = mapped_column(String(256), default="")
    avatar_url: Mapped[str | None] = mapped_column(String(512), nullable=True)


class _Timestamps:
    created_time: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_edited_time: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(36))
    last_edited_by: Mapped[str] = mapped_column(String(36))
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    seq: Mapped[int] = mapped_column(Integer)


class NotionPage(WorldScoped, _Timestamps, Base):
    __tablename__ = "notion_pages"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    parent_type: Mapped[str] = mapped_column(String(16))  # database_id | page_id | workspace
    parent_id: Mapped[str] = mapped_column(String(36), default="", index=True)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON)
    icon: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    cover: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class NotionDatabase(WorldScoped, _Timestamps, Base):
    __tablename__ = "notion_databases"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    parent_type: Mapped[str] = mapped_column(String(16))
    parent_id: Mapped[str] = mapped_column(String(36), default="")
    title: Mapped[list[Any]] = mapped_column(JSON)
    description: Mapped[list[Any]] = mapped_column(JSON)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON)  # name -> schema entry
    icon: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    cover: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    is_inline: Mapped[bool] = mapped_column(Boolean, default=False)


class NotionBlock(WorldScoped, _Timestamps, Base):
    """A content block; sub-pages and inline databases also appear as ``child_page`` /
    ``child_database`` blocks under their parent page (same id as the page / database)."""

    __tablename__ = "notion_blocks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    parent_type: Mapped[str] = mapped_column(String(16))  # page_id | block_id
    parent_id: Mapped[str] = mapped_column(String(36), index=True)
    position: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(32))
    content: Mapped[dict[str, Any]] = mapped_column(JSON)


class NotionComment(WorldScoped, Base):
    __tablename__ = "notion_comments"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    parent_type: Mapped[str] = mapped_column(String(16))  # page_id | block_id
    parent_id: Mapped[str] = mapped_column(String(36), index=True)
    discussion_id: Mapped[str] = mapped_column(String(36))
    rich_text: Mapped[list[Any]] = mapped_column(JSON)
    created_time: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(36))
    seq: Mapped[int] = mapped_column(Integer)
