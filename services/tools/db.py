"""The tools service's declarative base and the world-scoping convention every app follows.

Every app table carries ``world_id`` as the first column of its primary key (mix in
:class:`WorldScoped`). That one rule gives isolation (every query filters by world), and lets
snapshot / restore / fork / state export work generically over ``Base.metadata``: copy the rows
whose ``world_id`` matches, rewriting it for a fork. Ids inside a world (message ids, Slack ts,
Notion uuids) are therefore only unique per world, and forks keep them identical.
"""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, declared_attr, mapped_column

from shared.db import service_base

Base = service_base()


class WorldScoped:
    """Mixin: the ``world_id`` primary-key column (declare the row id as a second PK column)."""

    @declared_attr
    def world_id(cls) -> Mapped[str]:  # noqa: N805 - SQLAlchemy declared_attr signature
        return mapped_column(String(64), primary_key=True, index=True)


def world_scoped_tables() -> list:
    """Every table with a ``world_id`` column, in dependency order."""
    return [t for t in Base.metadata.sorted_tables if "world_id" in t.c]
