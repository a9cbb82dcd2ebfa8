"""rollouts: batches, samples (shared job model), forked setups, token segments

Revision ID: o0003
Revises: o0002
"""

import sqlalchemy as sa
from alembic import op

from shared.jobs.migration import job_columns_v1

revision = "o0003"
down_revision = "o0002"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "orchestrator_rollouts",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("policy", sa.JSON, nullable=False),
        sa.Column("pause_iteration", sa.Integer, nullable=False),
        sa.Column("history", sa.JSON, nullable=False),
    )
    op.create_table(
        "orchestrator_rollout_samples",
        *job_columns_v1(),
        sa.Column("rollout_id", sa.String(64), nullable=False, index=True),
        sa.Column("task_index", sa.Integer, nullable=False),
        sa.Column("k", sa.Integer, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
        sa.Column("sandbox_id", sa.String(64), nullable=True),
        sa.Column("world_id", sa.String(64), nullable=True),
        sa.Column("world_token", sa.String(128), nullable=True),
        sa.Column("reward", sa.Float, nullable=True),
        sa.Column("paused", sa.JSON, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
    )
    op.create_table(
        "orchestrator_rollout_setups",
        sa.Column("rollout_id", sa.String(64), primary_key=True),
        sa.Column("task_index", sa.Integer, primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("claimed_at", TZ, nullable=False),
        sa.Column("world_id", sa.String(64), nullable=True),
        sa.Column("world_token", sa.String(128), nullable=True),
        sa.Column("sandbox_id", sa.String(64), nullable=True),
        sa.Column("setup_s", sa.Float, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_table(
        "orchestrator_rollout_segments",
        sa.Column("sample_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("prompt_ids", sa.JSON, nullable=False),
        sa.Column("completion_ids", sa.JSON, nullable=False),
        sa.Column("logprobs", sa.JSON, nullable=False),
        sa.Column("version", sa.String(128), nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("finish_reason", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    for name in ("segments", "setups", "samples"):
        op.drop_table(f"orchestrator_rollout_{name}")
    op.drop_table("orchestrator_rollouts")
