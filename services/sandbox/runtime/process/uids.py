"""Host uids of process sandboxes: one per running sandbox, so that a guest that gets past its
namespaces still holds a uid no other sandbox's files or processes have.

Uids are claimed from ``guest_uid + 1 .. guest_uid + count`` (``guest_uid`` itself is the
canonical owner on disk, never a sandbox's, see :mod:`~.idmap`) by creating
``<root>/uids/<uid>`` exclusively, holding the sandbox id: the claim outlives a service restart
(an adopted sandbox keeps its uid) and is released when the sandbox stops.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from services.sandbox.runtime.base import RuntimeUnavailable


class UidPool:
    """Claims and releases per-sandbox host uids."""

    def __init__(self, folder: Path, base: int, count: int) -> None:
        self.folder = Path(folder)
        self.base, self.count = base, count

    def claim(self, sandbox_id: str) -> int:
        """A uid of the range now held for ``sandbox_id`` (the one it holds already, if any)."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        held = self.held_by(sandbox_id)
        if held is not None:
            return held
        for uid in range(self.base + 1, self.base + self.count + 1):
            try:
                fd = os.open(self.folder / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(sandbox_id)
            return uid
        raise RuntimeUnavailable(
            f"no free sandbox uid in {self.base + 1}..{self.base + self.count} "
            "(K3STACK_SANDBOX__PROCESS_GUEST_UIDS sandboxes run already)"
        )

    def held_by(self, sandbox_id: str) -> int | None:
        if not self.folder.is_dir():
            return None
        for entry in os.scandir(self.folder):
            with contextlib.suppress(OSError, ValueError):
                if Path(entry.path).read_text() == sandbox_id:
                    return int(entry.name)
        return None

    def release(self, uid: int | None, sandbox_id: str) -> None:
        """Give ``uid`` back if ``sandbox_id`` holds it."""
        if uid is None:
            return
        path = self.folder / str(uid)
        with contextlib.suppress(OSError):
            if path.read_text() == sandbox_id:
                path.unlink()
