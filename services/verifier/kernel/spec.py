"""Kernel task format: ``tasks/<name>/task.yaml`` beside ``reference.py`` and ``expert.py``.

``reference.py`` defines ``make_inputs(gen, **shape)`` (a tuple of tensors drawn from the
``torch.Generator`` it is given) and ``reference(*inputs)``; it may define ``oracle(*inputs)``
(default: ``reference`` on float64 copies of the float inputs). ``expert.py`` exposes the
task's entry point: the 0.5-reward implementation. Both import only torch, because the harness
loads them inside the sandbox as well as in the verifier.
"""

from __future__ import annotations

import ast
import json
import operator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from services.verifier import taskdirs

TASKS_DIR = Path(__file__).parent / "tasks"
SCHEMA_PATH = Path(__file__).parent / "task.schema.json"

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}  # fmt: skip


def evaluate(expr: str | float, shape: dict[str, int]) -> float:
    """Arithmetic over shape parameters (``2*rows*cols``): no names but the shape's, no calls."""
    if isinstance(expr, int | float):
        return float(expr)

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in shape:
            return float(shape[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(
            f"roofline expression {expr!r}: only numbers, + - * / // ** and {sorted(shape)}"
        )

    return ev(ast.parse(expr, mode="eval").body)


class Tolerance(BaseModel):
    """Two checks, both must pass: ``allclose(candidate, reference, atol, rtol)``, and the
    candidate's normalised error against the fp64 oracle at most
    ``max(oracle_factor * error(reference), oracle_floor)``."""

    model_config = ConfigDict(extra="forbid")
    atol: float = Field(1e-5, gt=0)
    rtol: float = Field(1e-5, ge=0)
    oracle_factor: float = Field(8.0, ge=1)
    oracle_floor: float = Field(1e-6, gt=0)


class Roofline(BaseModel):
    """Work per call as expressions of the timing shape; device peaks are measured in the run."""

    model_config = ConfigDict(extra="forbid")
    flops: str | float = Field(description="Floating-point operations per call.")
    bytes: str | float = Field(description="Bytes a call must read and write at least.")


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid")
    shape: dict[str, int] = Field(description="make_inputs arguments for the timed calls.")
    warmups: int = Field(3, ge=1)
    trials: int = Field(5, ge=3, description="Trials, each on fresh inputs with a cold cache.")
    iterations: int = Field(5, ge=1, description="Timed calls per trial, each on fresh inputs.")


class KernelTask(BaseModel):
    """One kernel task (``task.yaml``); ``docs/verifier.md`` explains each field."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    description: str
    entry_point: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Function the candidate module exposes."
    )
    dtype: Literal["float32", "float64"] = "float32"
    shapes: list[dict[str, int]] = Field(
        min_length=1, description="Correctness shapes, cycled over the trials."
    )
    correctness_trials: int = Field(5, ge=5)
    timing: Timing
    tolerance: Tolerance = Field(default_factory=Tolerance)
    roofline: Roofline
    forbidden_ops: list[str] = Field(
        default_factory=list,
        description="aten ops (profiler names) that do the task's whole job in the library.",
    )
    forbidden_calls: list[str] = Field(
        default_factory=list,
        description="Attribute / function names the candidate's source may not call.",
    )
    timeout_s: float = Field(240.0, gt=0, description="Wall-clock limit of one verification run.")
    _dir: Path | None = PrivateAttr(None)

    @field_validator("shapes")
    @classmethod
    def _positive(cls, v: list[dict[str, int]]) -> list[dict[str, int]]:
        for s in v:
            if any(n <= 0 for n in s.values()):
                raise ValueError(f"shape {s}: every size must be positive")
        return v

    @property
    def directory(self) -> Path:
        return self._dir or TASKS_DIR / self.name

    def roofline_work(self) -> tuple[float, float]:
        return evaluate(self.roofline.flops, self.timing.shape), evaluate(
            self.roofline.bytes, self.timing.shape
        )


class UnknownTask(LookupError):
    """No task of that name: the API answers 404."""


def task_names() -> list[str]:
    return taskdirs.names("kernel", TASKS_DIR)


def load_task_dir(directory: Path) -> KernelTask:
    """The task in ``directory`` (its ``task.yaml``; the name must be the directory's)."""
    path = directory / "task.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    task = KernelTask.model_validate(data)
    if task.name != directory.name:
        raise ValueError(
            f"{path}: name {task.name!r} differs from its directory {directory.name!r}"
        )
    task._dir = directory
    return task


def load_task(name: str) -> KernelTask:
    """A shipped task, or a user's from the tasks folder (``taskdirs``)."""
    directory = taskdirs.find("kernel", TASKS_DIR, name)
    if directory is None:
        raise UnknownTask(f"no kernel task {name!r} (known: {', '.join(task_names())})")
    return load_task_dir(directory)


def json_schema() -> dict[str, Any]:
    return KernelTask.model_json_schema()


def write_schema() -> None:
    SCHEMA_PATH.write_text(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_schema()
