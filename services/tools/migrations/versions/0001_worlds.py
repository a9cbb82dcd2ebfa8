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
        sa.Column("token_sha256", sa.String(64), nullable=False, index=True),
        sa.Column("clock", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id_counter", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "tools_actions",
        sa.Column("world_id", sa.String(64), primary_key=True, index=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("app", sa.String(32), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tools_actions")
    op.drop_table("tools_worlds")
