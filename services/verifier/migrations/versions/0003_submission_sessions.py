"""submission-loop sessions

Revision ID: v0003
Revises: v0002
"""

import sqlalchemy as sa
from alembic import op

revision = "v0003"
down_revision = "v0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "verifier_submission_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("task", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("verifier_submission_sessions")
