"""calendar: calendars and events

Revision ID: calendar0001
Revises: t0001
"""

import sqlalchemy as sa
from alembic import op

revision = "calendar0001"
down_revision = "t0001"
branch_labels = ("calendar",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calendar_calendars",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=256), nullable=False),
        sa.Column("summary", sa.String(length=512), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("time_zone", sa.String(length=64), nullable=False),
        sa.Column("owner_email", sa.String(length=256), nullable=False),
        sa.Column("owner_name", sa.String(length=256), nullable=False),
        sa.Column("primary", sa.Boolean(), nullable=False),
        sa.Column("in_list", sa.Boolean(), nullable=False),
        sa.Column("color_id", sa.String(length=8), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_calendar_calendars_world_id"), "calendar_calendars", ["world_id"], unique=False
    )
    op.create_table(
        "calendar_events",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=1024), nullable=False),
        sa.Column("calendar_id", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("start", sa.JSON(), nullable=False),
        sa.Column("end", sa.JSON(), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attendees", sa.JSON(), nullable=False),
        sa.Column("organizer_email", sa.String(length=256), nullable=False),
        sa.Column("creator_email", sa.String(length=256), nullable=False),
        sa.Column("recurrence", sa.JSON(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_calendar_events_calendar_id"), "calendar_events", ["calendar_id"], unique=False
    )
    op.create_index(
        op.f("ix_calendar_events_start_at"), "calendar_events", ["start_at"], unique=False
    )
    op.create_index(
        op.f("ix_calendar_events_world_id"), "calendar_events", ["world_id"], unique=False
    )
    op.create_table(
        "calendar_meta",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("agent_email", sa.String(length=256), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id"),
    )
    op.create_index(op.f("ix_calendar_meta_world_id"), "calendar_meta", ["world_id"], unique=False)


def downgrade() -> None:
    op.drop_table("calendar_meta")
    op.drop_table("calendar_events")
    op.drop_table("calendar_calendars")
