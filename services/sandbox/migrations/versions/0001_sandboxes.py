"""sandboxes, checkpoints, templates

Revision ID: s0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "s0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_sandboxes",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("template_id", sa.String(128), nullable=False),
        sa.Column("runtime", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("cpu_count", sa.Integer, nullable=False),
        sa.Column("memory_mb", sa.Integer, nullable=False),
        sa.Column("timeout_s", sa.Integer, nullable=False),
        sa.Column("on_timeout", sa.String(8), nullable=False),
        sa.Column("metadata", sa.JSON, nullable=False),
        sa.Column("env_vars", sa.JSON, nullable=False),
        sa.Column("network", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("head_checkpoint_id", sa.String(64), nullable=True),
        sa.Column("forked_from", sa.String(64), nullable=True),
        sa.Column("last_snapshot_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("handle", sa.JSON, nullable=True),
    )
    op.create_table(
        "sandbox_checkpoints",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("sandbox_id", sa.String(64), nullable=False, index=True),
        sa.Column(
            "parent_id",
            sa.String(64),
            sa.ForeignKey("sandbox_checkpoints.id"),
            nullable=True,
            index=True,
        ),
        sa.Column("runtime", sa.String(32), nullable=False),
        sa.Column("template_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("memory", sa.Boolean, nullable=False),
        sa.Column("manifest_key", sa.String(512), nullable=False),
        sa.Column("bytes_stored", sa.BigInteger, nullable=False),
        sa.Column("bytes_total", sa.BigInteger, nullable=False),
        sa.Column("cpu_count", sa.Integer, nullable=False),
        sa.Column("memory_mb", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("info", sa.JSON, nullable=False),
    )
    op.create_table(
        "sandbox_templates",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("runtime", sa.String(32), nullable=False),
        sa.Column("base", sa.String(128), nullable=True),
        sa.Column("steps", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("builtin", sa.Boolean, nullable=False),
        sa.Column("cpu_count", sa.Integer, nullable=False),
        sa.Column("memory_mb", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("spawn_count", sa.Integer, nullable=False),
        sa.Column("logs", sa.JSON, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("image", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sandbox_templates")
    op.drop_table("sandbox_checkpoints")
    op.drop_table("sandbox_sandboxes")
