"""Gmail's tables. A message row keeps its raw RFC 2822 bytes (the truth every format is
answered from) plus the parsed fields search needs; only ``label_ids`` ever changes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from services.tools.db import Base, WorldScoped


class GmailMailbox(WorldScoped, Base):
    """The world's one mailbox: its address and counters (history ids, label numbers)."""

    __tablename__ = "gmail_mailboxes"

    email: Mapped[str] = mapped_column(String(320))
    display_name: Mapped[str] = mapped_column(String(200), default="")
    history_id: Mapped[int] = mapped_column(Integer, default=1000)
    label_seq: Mapped[int] = mapped_column(Integer, default=0)


class GmailMessage(WorldScoped, Base):
    __tablename__ = "gmail_messages"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    thread_id: Mapped[str] = mapped_column(String(32), index=True)
    label_ids: Mapped[list[str]] = mapped_column(JSON)
    internal_date: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    history_id: Mapped[int] = mapped_column(Integer)
    created_seq: Mapped[int] = mapped_column(Integer, default=0)  # order among equal dates
    size_estimate: Mapped[int] = mapped_column(Integer)
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    # Parsed once at insert, for search, snippets and threading.
    sender: Mapped[str] = mapped_column(Text, default="")
    to: Mapped[str] = mapped_column(Text, default="")
    cc: Mapped[str] = mapped_column(Text, default="")
    bcc: Mapped[str] = mapped_column(Text, default="")
    subject: Mapped[str] = mapped_column(Text, default="")
    rfc822_id: Mapped[str] = mapped_column(String(512), default="", index=True)
    references: Mapped[list[str]] = mapped_column(JSON)
    snippet: Mapped[str] = mapped_column(Text, default="")
    text: Mapped[str] = mapped_column(Text, default="")
    attachments: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON)  # delivered-to, list-id


class GmailLabel(WorldScoped, Base):
    """User labels (system labels are constants, see ``actions.SYSTEM_LABELS``)."""

    __tablename__ = "gmail_labels"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(225))
    message_list_visibility: Mapped[str] = mapped_column(String(16), default="show")
    label_list_visibility: Mapped[str] = mapped_column(String(32), default="labelShow")
    color: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class GmailDraft(WorldScoped, Base):
    __tablename__ = "gmail_drafts"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    message_id: Mapped[str] = mapped_column(String(32))


class GmailHistory(WorldScoped, Base):
    """One mailbox change, for ``history.list``."""

    __tablename__ = "gmail_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(
        String(24)
    )  # messageAdded | messageDeleted | labelAdded | labelRemoved
    message_id: Mapped[str] = mapped_column(String(32))
    thread_id: Mapped[str] = mapped_column(String(32))
    label_ids: Mapped[list[str]] = mapped_column(JSON)
    message_labels: Mapped[list[str]] = mapped_column(JSON)
