"""Where tasks live: the shipped ones beside the code, and users' own under one folder named by
``K3STACK_VERIFIER__TASKS_DIR`` (default ``<data dir>/verifier-tasks``): ``kernel/<name>/`` and
``web/<name>/``, the same format as the shipped ones. A shipped name cannot be shadowed."""

from __future__ import annotations

from pathlib import Path

from shared.settings import get_settings


def user_tasks_dir() -> Path:
    s = get_settings()
    return Path(s.verifier.tasks_dir or s.data_dir / "verifier-tasks").expanduser()


def roots(kind: str, shipped: Path) -> list[Path]:
    """Folders holding ``<name>/task.yaml`` of one kind, the shipped one first."""
    return [shipped, user_tasks_dir() / kind]


def find(kind: str, shipped: Path, name: str) -> Path | None:
    """The directory of task ``name``, or None (names are ``[a-z0-9_]`` only)."""
    if not name or not name.replace("_", "").isalnum() or not name.isascii():
        return None
    for root in roots(kind, shipped):
        if (root / name / "task.yaml").is_file():
            return root / name
    return None


def names(kind: str, shipped: Path) -> list[str]:
    return sorted({p.parent.name for r in roots(kind, shipped) for p in r.glob("*/task.yaml")})
