"""Whether a migrated database matches the models: what alembic's autogenerate would change."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, MetaData


def schema_diffs(engine: Engine, metadata: MetaData) -> list[Any]:
    """The differences between ``engine``'s tables and ``metadata`` (types compared), the
    migration bookkeeping table left out; ``[]`` when the migrations build the models."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(ctx, metadata) if "alembic_version" not in str(d)]
