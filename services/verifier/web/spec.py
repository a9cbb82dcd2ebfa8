"""Web task format: ``tasks/<name>/task.yaml`` and a ``reference/`` app (static files).

Each check is a list of Playwright steps. ``{word}`` in a step's text is replaced by a fresh
random word per run (the same for the reference and the candidate), so text hard-coded in a
page cannot match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from services.verifier import taskdirs

TASKS_DIR = Path(__file__).parent / "tasks"
MAX_APP_BYTES = 20 << 20
"""Largest app (all its files together) the web verifier takes."""


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal[
        "goto",
        "click",
        "type",
        "press",
        "expect_text",
        "expect_count",
        "expect_visible",
        "screenshot",
    ]
    selector: str | None = None
    path: str = "/"
    text: str | None = None
    key: str | None = None
    equals: str | None = None
    contains: str | None = None
    count: int | None = Field(None, ge=0)
    name: str | None = None

    @property
    def is_expectation(self) -> bool:
        return self.action.startswith("expect_")


class WebCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    steps: list[Step] = Field(min_length=1)


class Weights(BaseModel):
    """Weights of the reward's terms; the reward is their weighted mean over the terms present
    (the judge term only when a judge was asked for and gave a usable score)."""

    model_config = ConfigDict(extra="forbid")
    functional: float = Field(0.7, ge=0)
    dom: float = Field(0.15, ge=0)
    pixel: float = Field(0.15, ge=0)
    judge: float = Field(0.2, ge=0, description="Weight of the optional model-judge term.")


class WebTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    spec: str = Field(description="The prompt the agent built the app from.")
    port: int = Field(
        8080, ge=1024, le=65535, description="Port the app is served on in the sandbox."
    )
    viewport: tuple[int, int] = (800, 600)
    checks: list[WebCheck] = Field(min_length=1)
    weights: Weights = Field(default_factory=Weights)
    build_timeout_s: float = 300.0
    _dir: Path | None = PrivateAttr(None)

    @property
    def reference_dir(self) -> Path:
        return (self._dir or TASKS_DIR / self.name) / "reference"


class UnknownWebTask(LookupError):
    pass


def web_task_names() -> list[str]:
    return taskdirs.names("web", TASKS_DIR)


def load_web_task(name: str) -> WebTask:
    """A shipped web task, or a user's from the tasks folder (``taskdirs``)."""
    directory = taskdirs.find("web", TASKS_DIR, name)
    if directory is None:
        raise UnknownWebTask(f"no web task {name!r} (known: {', '.join(web_task_names())})")
    task = WebTask.model_validate(yaml.safe_load((directory / "task.yaml").read_text()))
    task._dir = directory
    return task
