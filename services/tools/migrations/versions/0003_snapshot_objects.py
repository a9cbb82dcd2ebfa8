"""snapshots: large ones live in the object store

Revision ID: t0003
Revises: t0002
"""

import sqlalchemy as sa
from alembic import op

revision = "t0003"
down_revision = "t0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tools_snapshots") as batch:
        batch.add_column(sa.Column("object_key", sa.String(256), nullable=True))
        batch.alter_column("data", existing_type=sa.LargeBinary, nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("tools_snapshots") as batch:
        batch.alter_column("data", existing_type=sa.LargeBinary, nullable=False)
        batch.drop_column("object_key")
