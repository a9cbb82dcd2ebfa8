"""worlds

Revision ID: t0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "t0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tools_worlds",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("scenario", sa.String(128), nullable=False),
        sa.Column("seed", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tools_worlds")
