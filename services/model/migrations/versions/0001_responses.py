"""stored responses (Responses API store: true)

Revision ID: m0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "m0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_responses",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
        sa.Column("expires_at", sa.Float, nullable=False, index=True),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("conversation", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_responses")
