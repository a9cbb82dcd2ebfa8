"""Reading the world's action log: where an event's own actions end."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.tools.models import ActionRow


def event_seq(session: Session, world_id: str, event_id: str) -> int | None:
    """The last action-log position of what ``event_id`` did (None: it has done nothing)."""
    return session.scalar(
        select(func.max(ActionRow.seq)).where(
            ActionRow.world_id == world_id, ActionRow.actor == f"event:{event_id}"
        )
    )
