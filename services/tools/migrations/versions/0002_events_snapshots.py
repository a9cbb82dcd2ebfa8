"""events, checks, row marks, snapshots; world reset/fork bookkeeping

Revision ID: t0002
Revises: t0001
"""

import sqlalchemy as sa
from alembic import op

revision = "t0002"
down_revision = "t0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tools_worlds") as batch:
        batch.add_column(sa.Column("initial_snapshot_id", sa.String(64), nullable=True))
        batch.add_column(
            sa.Column("actions_scanned", sa.Integer, nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("parent_id", sa.String(64), nullable=True))
    op.create_table(
        "tools_events",
        sa.Column("world_id", sa.String(64), primary_key=True, index=True),
        sa.Column("event_id", sa.String(128), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("trigger_seq", sa.Integer, nullable=True),
        sa.Column("spec", sa.JSON, nullable=False),
    )
    op.create_table(
        "tools_check_results",
        sa.Column("world_id", sa.String(64), primary_key=True, index=True),
        sa.Column("check_id", sa.String(160), primary_key=True),
        sa.Column("event_id", sa.String(128), nullable=False),
        sa.Column("evaluated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
    )
    op.create_table(
        "tools_row_marks",
        sa.Column("world_id", sa.String(64), primary_key=True, index=True),
        sa.Column("tbl", sa.String(64), primary_key=True),
        sa.Column("pk", sa.String(512), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False),
    )
    op.create_table(
        "tools_snapshots",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("origin_world", sa.String(64), nullable=False, index=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("clock", sa.DateTime(timezone=True), nullable=False),
        sa.Column("label", sa.String(128), nullable=True),
        sa.Column("state_hash", sa.String(64), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tools_snapshots")
    op.drop_table("tools_row_marks")
    op.drop_table("tools_check_results")
    op.drop_table("tools_events")
    with op.batch_alter_table("tools_worlds") as batch:
        batch.drop_column("parent_id")
        batch.drop_column("actions_scanned")
        batch.drop_column("initial_snapshot_id")
