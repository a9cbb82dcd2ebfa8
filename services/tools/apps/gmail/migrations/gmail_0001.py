"""gmail: mailboxes, messages, labels, drafts, history

Revision ID: gmail_0001
Revises: t0001
"""

import sqlalchemy as sa
from alembic import op

revision = "gmail_0001"
down_revision = "t0001"
branch_labels = ("gmail",)
depends_on = None


def _world() -> sa.Column:
    return sa.Column("world_id", sa.String(64), primary_key=True, index=True)


def upgrade() -> None:
    op.create_table(
        "gmail_mailboxes",
        _world(),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("history_id", sa.Integer, nullable=False),
        sa.Column("label_seq", sa.Integer, nullable=False),
    )
    op.create_table(
        "gmail_messages",
        _world(),
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("thread_id", sa.String(32), nullable=False, index=True),
        sa.Column("label_ids", sa.JSON, nullable=False),
        sa.Column("internal_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("history_id", sa.Integer, nullable=False),
        sa.Column("created_seq", sa.Integer, nullable=False),
        sa.Column("size_estimate", sa.Integer, nullable=False),
        sa.Column("raw", sa.LargeBinary, nullable=False),
        sa.Column("sender", sa.Text, nullable=False),
        sa.Column("to", sa.Text, nullable=False),
        sa.Column("cc", sa.Text, nullable=False),
        sa.Column("bcc", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("rfc822_id", sa.String(512), nullable=False, index=True),
        sa.Column("references", sa.JSON, nullable=False),
        sa.Column("snippet", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("attachments", sa.JSON, nullable=False),
        sa.Column("extra", sa.JSON, nullable=False),
    )
    op.create_table(
        "gmail_labels",
        _world(),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(225), nullable=False),
        sa.Column("message_list_visibility", sa.String(16), nullable=False),
        sa.Column("label_list_visibility", sa.String(32), nullable=False),
        sa.Column("color", sa.JSON, nullable=True),
    )
    op.create_table(
        "gmail_drafts",
        _world(),
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("message_id", sa.String(32), nullable=False),
    )
    op.create_table(
        "gmail_history",
        _world(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("message_id", sa.String(32), nullable=False),
        sa.Column("thread_id", sa.String(32), nullable=False),
        sa.Column("label_ids", sa.JSON, nullable=False),
        sa.Column("message_labels", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "gmail_history",
        "gmail_drafts",
        "gmail_labels",
        "gmail_messages",
        "gmail_mailboxes",
    ):
        op.drop_table(table)
