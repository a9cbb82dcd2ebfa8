"""verification jobs on the shared job model (shared/jobs.py)

Jobs from before it kept their status in Celery's result backend; they are carried over as
failed (code ``legacy``) so none reads as queued forever.

Revision ID: v0002
Revises: v0001
"""

import sqlalchemy as sa
from alembic import op

from shared.jobs.migration import job_columns_v1

revision = "v0002"
down_revision = "v0001"
branch_labels = None
depends_on = None

LEGACY = "recorded before the shared job model; its outcome lived in Celery's result backend"


def upgrade() -> None:
    op.rename_table("verifier_jobs", "verifier_jobs_v1")
    op.create_table(
        "verifier_jobs",
        *job_columns_v1(),
    )
    op.execute(
        sa.text(
            "INSERT INTO verifier_jobs (id, kind, status, payload, task_name, queue, created_at,"
            " finished_at, progress, progress_message, error_code, error_message, attempts)"
            " SELECT id, kind, 'failed', payload, 'verifier.echo', 'verifier', created_at,"
            " created_at, 0.0, '', 'legacy', :msg, 0 FROM verifier_jobs_v1"
        ).bindparams(msg=LEGACY)
    )
    op.drop_table("verifier_jobs_v1")


def downgrade() -> None:
    op.rename_table("verifier_jobs", "verifier_jobs_v2")
    op.create_table(
        "verifier_jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
    )
    op.execute(
        "INSERT INTO verifier_jobs (id, kind, created_at, payload)"
        " SELECT id, kind, created_at, payload FROM verifier_jobs_v2"
    )
    op.drop_table("verifier_jobs_v2")
