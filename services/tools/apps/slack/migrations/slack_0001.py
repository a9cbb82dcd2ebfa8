"""slack: users, conversations, messages, reactions, pins, files, schedules

Revision ID: slack0001
Revises: t0001
"""

import sqlalchemy as sa
from alembic import op

revision = "slack0001"
down_revision = "t0001"
branch_labels = ("slack",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_channels",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("is_archived", sa.Boolean(), nullable=False),
        sa.Column("is_general", sa.Boolean(), nullable=False),
        sa.Column("created", sa.BigInteger(), nullable=False),
        sa.Column("creator", sa.String(length=32), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=False),
        sa.Column("im_user", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_slack_channels_world_id"), "slack_channels", ["world_id"], unique=False
    )
    op.create_table(
        "slack_files",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=512), nullable=False),
        sa.Column("title", sa.String(length=512), nullable=False),
        sa.Column("mimetype", sa.String(length=128), nullable=False),
        sa.Column("user", sa.String(length=32), nullable=False),
        sa.Column("created", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("channels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(op.f("ix_slack_files_world_id"), "slack_files", ["world_id"], unique=False)
    op.create_table(
        "slack_members",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "channel_id", "user_id"),
    )
    op.create_index(op.f("ix_slack_members_world_id"), "slack_members", ["world_id"], unique=False)
    op.create_table(
        "slack_messages",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.String(length=32), nullable=False),
        sa.Column("user", sa.String(length=32), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=True),
        sa.Column("subtype", sa.String(length=32), nullable=True),
        sa.Column("edited_ts", sa.String(length=32), nullable=True),
        sa.Column("edited_by", sa.String(length=32), nullable=True),
        sa.Column("blocks", sa.JSON(), nullable=True),
        sa.Column("file_ids", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("world_id", "channel_id", "ts"),
    )
    op.create_index(
        op.f("ix_slack_messages_thread_ts"), "slack_messages", ["thread_ts"], unique=False
    )
    op.create_index(
        op.f("ix_slack_messages_world_id"), "slack_messages", ["world_id"], unique=False
    )
    op.create_table(
        "slack_meta",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("team_id", sa.String(length=32), nullable=False),
        sa.Column("team_name", sa.String(length=128), nullable=False),
        sa.Column("domain", sa.String(length=128), nullable=False),
        sa.Column("agent_user_id", sa.String(length=32), nullable=False),
        sa.Column("last_ts_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("world_id"),
    )
    op.create_index(op.f("ix_slack_meta_world_id"), "slack_meta", ["world_id"], unique=False)
    op.create_table(
        "slack_pins",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.String(length=32), nullable=False),
        sa.Column("pinned_by", sa.String(length=32), nullable=False),
        sa.Column("created", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "channel_id", "ts"),
    )
    op.create_index(op.f("ix_slack_pins_world_id"), "slack_pins", ["world_id"], unique=False)
    op.create_table(
        "slack_reactions",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "channel_id", "ts", "name", "user_id"),
    )
    op.create_index(
        op.f("ix_slack_reactions_world_id"), "slack_reactions", ["world_id"], unique=False
    )
    op.create_table(
        "slack_scheduled",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("user", sa.String(length=32), nullable=False),
        sa.Column("post_at", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("thread_ts", sa.String(length=32), nullable=True),
        sa.Column("blocks", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_slack_scheduled_post_at"), "slack_scheduled", ["post_at"], unique=False
    )
    op.create_index(
        op.f("ix_slack_scheduled_world_id"), "slack_scheduled", ["world_id"], unique=False
    )
    op.create_table(
        "slack_users",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("real_name", sa.String(length=256), nullable=False),
        sa.Column("email", sa.String(length=256), nullable=False),
        sa.Column("title", sa.String(length=256), nullable=False),
        sa.Column("tz", sa.String(length=64), nullable=False),
        sa.Column("is_bot", sa.Boolean(), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(op.f("ix_slack_users_world_id"), "slack_users", ["world_id"], unique=False)


def downgrade() -> None:
    op.drop_table("slack_users")
    op.drop_table("slack_scheduled")
    op.drop_table("slack_reactions")
    op.drop_table("slack_pins")
    op.drop_table("slack_meta")
    op.drop_table("slack_messages")
    op.drop_table("slack_members")
    op.drop_table("slack_files")
    op.drop_table("slack_channels")
