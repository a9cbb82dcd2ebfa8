"""canvas: objects and meta

Revision ID: canvas0001
Revises: t0001
"""

import sqlalchemy as sa
from alembic import op

revision = "canvas0001"
down_revision = "t0001"
branch_labels = ("canvas",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "canvas_meta",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id"),
    )
    op.create_index(op.f("ix_canvas_meta_world_id"), "canvas_meta", ["world_id"], unique=False)
    op.create_table(
        "canvas_objects",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_canvas_objects_world_id"), "canvas_objects", ["world_id"], unique=False
    )
    op.create_index(op.f("ix_canvas_objects_kind"), "canvas_objects", ["kind"], unique=False)


def downgrade() -> None:
    op.drop_table("canvas_objects")
    op.drop_table("canvas_meta")
