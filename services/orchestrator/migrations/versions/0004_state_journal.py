"""episode state journal: a step record per tick, the state column a snapshot as of a tick

Revision ID: o0004
Revises: o0003
"""

import sqlalchemy as sa
from alembic import op

revision = "o0004"
down_revision = "o0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # an episode stored before the journal: its state is the snapshot as of tick 0
    with op.batch_alter_table("orchestrator_episodes") as batch:
        batch.add_column(sa.Column("state_tick", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "orchestrator_episode_steps",
        sa.Column("episode_id", sa.String(64), primary_key=True),
        sa.Column("tick", sa.Integer, primary_key=True),
        sa.Column("items_to", sa.Integer, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delta", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("orchestrator_episode_steps")
    with op.batch_alter_table("orchestrator_episodes") as batch:
        batch.drop_column("state_tick")
