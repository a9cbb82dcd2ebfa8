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

CORE_PREFIX = "tools_"
"""Core tables (worlds, actions, events, checks, marks) are named ``tools_*``; app tables are not."""


class WorldScoped:
    """Mixin: the ``world_id`` primary-key column (declare the row id as a second PK column)."""

    @declared_attr
    def world_id(cls) -> Mapped[str]:  # noqa: N805 - SQLAlchemy declared_attr signature
        # sort_order puts it first in the table and in identity keys, so
        # ``session.get(Model, (world_id, id))`` works as the docstring above promises.
        return mapped_column(String(64), primary_key=True, index=True, sort_order=-100)
