"""episodes on the shared job model (shared/jobs.py)

The episode row becomes a job row (``JobMixin`` columns: ``request`` is now ``payload``,
``worker`` is ``owner``, the lease's expiry gives way to ``heartbeat_at``; a cancel is the job's
``cancelled`` status, not a flag) and keeps what only an episode has (state, world/sandbox,
reward). Episodes from before carry over as they were; a running one's last update becomes its
heartbeat, so the job reaper re-queues it once that is older than the lease.

Revision ID: o0002
Revises: o0001
"""

import sqlalchemy as sa
from alembic import op

from shared.jobs.migration import job_columns_v1

revision = "o0002"
down_revision = "o0001"
branch_labels = None
depends_on = None

TASK = "orchestrator.run_episode"


def upgrade() -> None:
    op.drop_index("ix_orchestrator_episodes_status", table_name="orchestrator_episodes")
    op.rename_table("orchestrator_episodes", "orchestrator_episodes_v1")
    op.create_table(
        "orchestrator_episodes",
        *job_columns_v1(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
        sa.Column("sandbox_id", sa.String(64), nullable=True),
        sa.Column("world_id", sa.String(64), nullable=True),
        sa.Column("resources_released", sa.Boolean, nullable=False),
        sa.Column("reward", sa.Float, nullable=True),
        sa.Column("result_location", sa.String(512), nullable=True),
    )
    op.execute(
        sa.text(
            "INSERT INTO orchestrator_episodes (id, kind, status, payload, task_name, queue,"
            " created_at, finished_at, heartbeat_at, progress, progress_message, result,"
            " error_code, error_message, attempts, owner, updated_at, state, sandbox_id,"
            " world_id, resources_released, reward, result_location)"
            " SELECT id, kind,"
            " CASE WHEN status = 'running' AND cancel_requested THEN 'cancelled'"
            " ELSE status END,"
            " request, :task, 'orchestrator', created_at,"
            " CASE WHEN status IN ('succeeded', 'failed', 'cancelled') THEN updated_at END,"
            " updated_at, progress, 'carried over', result, error_code, error_message,"
            " attempts, worker, updated_at, state, sandbox_id, world_id, resources_released,"
            " reward, result_location FROM orchestrator_episodes_v1"
        ).bindparams(task=TASK)
    )
    op.drop_table("orchestrator_episodes_v1")


def downgrade() -> None:
    for name in ("kind", "status", "created_at"):
        op.drop_index(f"ix_orchestrator_episodes_{name}", table_name="orchestrator_episodes")
    op.rename_table("orchestrator_episodes", "orchestrator_episodes_v2")
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
    op.execute(
        "INSERT INTO orchestrator_episodes (id, kind, status, created_at, updated_at, request,"
        " state, progress, worker, attempts, cancel_requested, sandbox_id, world_id,"
        " resources_released, reward, result, result_location, error_code, error_message)"
        " SELECT id, kind, status, created_at, updated_at, payload, state, progress, owner,"
        " attempts, status = 'cancelled', sandbox_id, world_id, resources_released, reward,"
        " result, result_location, error_code, error_message FROM orchestrator_episodes_v2"
    )
    op.drop_table("orchestrator_episodes_v2")
