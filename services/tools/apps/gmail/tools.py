"""Gmail MCP tools, named as the widely used Gmail MCP server names them (``search_emails``,
``read_email``, ``send_email``, ...), over ``services.tools.apps.gmail.actions``."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import format_datetime, formataddr
from typing import Any

from pydantic import BaseModel, Field

from services.tools.apps.gmail import actions as gmail
from services.tools.context import WorldContext
from services.tools.mcp.registry import NoArgs, tool


def _summary(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "threadId": row.thread_id,
        "from": row.sender,
        "to": row.to,
        "subject": row.subject,
        "date": row.internal_date.isoformat(),
        "snippet": row.snippet,
        "labelIds": list(row.label_ids or []),
    }


class SearchEmails(BaseModel):
    query: str = Field(
        description="Gmail search syntax, e.g. 'from:ana@acme.test is:unread after:2026/03/01'."
    )
    maxResults: int = Field(10, ge=1, le=500, description="At most this many messages.")  # noqa: N815


@tool("gmail", "search_emails", SearchEmails, read_only=True)
def search_emails(ctx: WorldContext, a: SearchEmails) -> Any:
    """Search emails with Gmail's query syntax; newest first."""
    rows = gmail.search(ctx, q=a.query)
    return {"messages": [_summary(r) for r in rows[: a.maxResults]], "total": len(rows)}


class MessageRef(BaseModel):
    messageId: str = Field(description="The message's id.")  # noqa: N815


@tool("gmail", "read_email", MessageRef, read_only=True)
def read_email(ctx: WorldContext, a: MessageRef) -> Any:
    """Read one email: headers, plain-text body, attachment names."""
    row = gmail.get_message_row(ctx, a.messageId)
    return {
        **_summary(row),
        "cc": row.cc,
        "body": row.text,
        "attachments": list(row.attachments or []),
    }


class Compose(BaseModel):
    to: list[str] = Field(description="Recipient addresses.")
    subject: str
    body: str = Field(description="Plain-text body.")
    cc: list[str] | None = None
    bcc: list[str] | None = None
    threadId: str | None = Field(None, description="Reply within this thread.")  # noqa: N815
    inReplyTo: str | None = Field(  # noqa: N815
        None, description="Message id being answered (sets In-Reply-To / References)."
    )


def _raw(ctx: WorldContext, a: Compose) -> bytes:
    box = gmail.mailbox(ctx)
    msg = EmailMessage()
    msg["From"] = formataddr((box.display_name or "", box.email))
    msg["To"] = ", ".join(a.to)
    if a.cc:
        msg["Cc"] = ", ".join(a.cc)
    if a.bcc:
        msg["Bcc"] = ", ".join(a.bcc)
    msg["Subject"] = a.subject
    msg["Date"] = format_datetime(ctx.now)
    if a.inReplyTo:
        parent = gmail.get_message_row(ctx, a.inReplyTo)
        if parent.rfc822_id:
            msg["In-Reply-To"] = parent.rfc822_id
            msg["References"] = " ".join([*(parent.references or []), parent.rfc822_id])
    msg.set_content(a.body)
    return msg.as_bytes()


def _thread(ctx: WorldContext, a: Compose) -> str | None:
    if a.threadId:
        return a.threadId
    if a.inReplyTo:
        return gmail.get_message_row(ctx, a.inReplyTo).thread_id
    return None


@tool("gmail", "send_email", Compose)
def send_email(ctx: WorldContext, a: Compose) -> Any:
    """Send an email (optionally as a reply in a thread)."""
    row = gmail.send(ctx, _raw(ctx, a), thread_id=_thread(ctx, a))
    return _summary(row)


@tool("gmail", "draft_email", Compose)
def draft_email(ctx: WorldContext, a: Compose) -> Any:
    """Save an email as a draft without sending it."""
    draft = gmail.create_draft(ctx, _raw(ctx, a), _thread(ctx, a))
    return gmail.draft_json(ctx, draft)


class Modify(MessageRef):
    addLabelIds: list[str] = Field(default_factory=list)  # noqa: N815
    removeLabelIds: list[str] = Field(default_factory=list)  # noqa: N815


@tool("gmail", "modify_email", Modify)
def modify_email(ctx: WorldContext, a: Modify) -> Any:
    """Add or remove labels (e.g. remove UNREAD to mark read, add STARRED)."""
    return _summary(gmail.modify(ctx, a.messageId, a.addLabelIds, a.removeLabelIds))


@tool("gmail", "delete_email", MessageRef)
def delete_email(ctx: WorldContext, a: MessageRef) -> Any:
    """Move an email to the trash."""
    return _summary(gmail.trash(ctx, a.messageId))


@tool("gmail", "list_email_labels", NoArgs, read_only=True)
def list_email_labels(ctx: WorldContext, a: NoArgs) -> Any:
    """List system and user labels."""
    return {"labels": gmail.list_labels(ctx)}


class LabelName(BaseModel):
    name: str = Field(min_length=1, max_length=225, description="The label's name.")


@tool("gmail", "get_or_create_label", LabelName)
def get_or_create_label(ctx: WorldContext, a: LabelName) -> Any:
    """Find a label by name, creating it when it does not exist; returns the label."""
    found = gmail.label_id_by_name(ctx, a.name)
    if found is not None:
        return gmail.label_json(ctx, found)
    return gmail.create_label(ctx, {"name": a.name})
