"""episode driver: the name of the driver that runs an episode or a rollout sample

Revision ID: o0005
Revises: o0004
"""

import sqlalchemy as sa
from alembic import op

revision = "o0005"
down_revision = "o0004"
branch_labels = None
depends_on = None

TABLES = ("orchestrator_episodes", "orchestrator_rollout_samples")


def upgrade() -> None:
    # a row stored before the column has none: its runner picks one by the harness kind
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("driver", sa.String(32), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("driver")
