"""episodes, trajectory items, tool calls

Revision ID: o0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "o0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orchestrator_episodes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("worker", sa.String(128)),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True)),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("sandbox_id", sa.String(64)),
        sa.Column("world_id", sa.String(64)),
        sa.Column("resources_released", sa.Boolean, nullable=False),
        sa.Column("reward", sa.Float),
        sa.Column("result", sa.JSON),
        sa.Column("result_location", sa.String(512)),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text),
    )
    op.create_table(
        "orchestrator_trajectory_items",
        sa.Column("episode_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("segment", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
    )
    op.create_table(
        "orchestrator_tool_calls",
        sa.Column("key", sa.String(160), primary_key=True),
        sa.Column("episode_id", sa.String(64), nullable=False, index=True),
        sa.Column("tool", sa.String(128), nullable=False),
        sa.Column("effect", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("pre_hash", sa.String(128)),
        sa.Column("observation", sa.Text),
        sa.Column("is_error", sa.Boolean, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("orchestrator_tool_calls")
    op.drop_table("orchestrator_trajectory_items")
    op.drop_table("orchestrator_episodes")
