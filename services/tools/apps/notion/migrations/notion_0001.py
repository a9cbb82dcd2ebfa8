"""notion: users, pages, databases, blocks, comments

Revision ID: notion0001
Revises: t0001
"""

import sqlalchemy as sa
from alembic import op

revision = "notion0001"
down_revision = "t0001"
branch_labels = ("notion",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notion_blocks",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("parent_type", sa.String(length=16), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_edited_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=36), nullable=False),
        sa.Column("last_edited_by", sa.String(length=36), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_notion_blocks_parent_id"), "notion_blocks", ["parent_id"], unique=False
    )
    op.create_index(op.f("ix_notion_blocks_world_id"), "notion_blocks", ["world_id"], unique=False)
    op.create_table(
        "notion_comments",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("parent_type", sa.String(length=16), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=False),
        sa.Column("discussion_id", sa.String(length=36), nullable=False),
        sa.Column("rich_text", sa.JSON(), nullable=False),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_notion_comments_parent_id"), "notion_comments", ["parent_id"], unique=False
    )
    op.create_index(
        op.f("ix_notion_comments_world_id"), "notion_comments", ["world_id"], unique=False
    )
    op.create_table(
        "notion_databases",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("parent_type", sa.String(length=16), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=False),
        sa.Column("title", sa.JSON(), nullable=False),
        sa.Column("description", sa.JSON(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("icon", sa.JSON(), nullable=True),
        sa.Column("cover", sa.JSON(), nullable=True),
        sa.Column("is_inline", sa.Boolean(), nullable=False),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_edited_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=36), nullable=False),
        sa.Column("last_edited_by", sa.String(length=36), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(
        op.f("ix_notion_databases_world_id"), "notion_databases", ["world_id"], unique=False
    )
    op.create_table(
        "notion_meta",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("workspace_name", sa.String(length=256), nullable=False),
        sa.Column("bot_user_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id"),
    )
    op.create_index(op.f("ix_notion_meta_world_id"), "notion_meta", ["world_id"], unique=False)
    op.create_table(
        "notion_pages",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("parent_type", sa.String(length=16), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("icon", sa.JSON(), nullable=True),
        sa.Column("cover", sa.JSON(), nullable=True),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_edited_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=36), nullable=False),
        sa.Column("last_edited_by", sa.String(length=36), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(op.f("ix_notion_pages_parent_id"), "notion_pages", ["parent_id"], unique=False)
    op.create_index(op.f("ix_notion_pages_world_id"), "notion_pages", ["world_id"], unique=False)
    op.create_table(
        "notion_users",
        sa.Column("world_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("email", sa.String(length=256), nullable=False),
        sa.Column("avatar_url", sa.String(length=512), nullable=True),
        sa.PrimaryKeyConstraint("world_id", "id"),
    )
    op.create_index(op.f("ix_notion_users_world_id"), "notion_users", ["world_id"], unique=False)


def downgrade() -> None:
    op.drop_table("notion_users")
    op.drop_table("notion_pages")
    op.drop_table("notion_meta")
    op.drop_table("notion_databases")
    op.drop_table("notion_comments")
    op.drop_table("notion_blocks")
