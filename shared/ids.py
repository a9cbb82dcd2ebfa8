"""Ids of the platform's long-lived objects (worlds, sandboxes, episodes, trajectories, jobs).

One rule for all, so an id from one service is valid in another's path and in an object key.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_id(value: str) -> str:
    """``value`` if it is a valid id, else ValueError saying what one looks like."""
    if not _ID.match(value):
        raise ValueError(
            "ids are 1-64 characters of letters, digits, '_', '.', '-', starting with a letter "
            f"or digit; got {value!r}"
        )
    return value


ResourceId = Annotated[str, AfterValidator(check_id)]
