"""Registering a user's kernel task through the API: checked whole before it is kept.

The task is written to a scratch folder, loaded the way a job loads it and exercised —
``make_inputs`` on every shape, ``reference`` (and ``oracle``) on those inputs, the roofline
expressions, the forbidden ops' names, the expert's entry point — and only then moved into the
users' tasks folder. A task that fails any of it is refused with its error. The reference runs
in the verifier's own process (it is the measurer's reference), so registering is for the
operators of the service, behind its API key, like the shipped tasks.
"""

from __future__ import annotations

import ast
import secrets
import shutil
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field, ValidationError

from services.verifier import taskdirs
from services.verifier.kernel.spec import TASKS_DIR, KernelTask, load_task_dir


class TaskRejected(ValueError):
    """The task does not load or does not run: a 422 with the reason."""


class TaskExists(ValueError):
    """A task of that name exists (shipped or registered): a 409."""


class KernelTaskRegistration(BaseModel):
    task: dict[str, Any] = Field(
        description="The task.yaml fields (docs/verifier.md, task.schema.json)."
    )
    reference: str = Field(
        max_length=1 << 20, description="reference.py: make_inputs, reference, optional oracle."
    )
    expert: str = Field(
        max_length=1 << 20, description="expert.py: the entry point that earns 0.55."
    )


def _module(path: Path, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _exercise(task: KernelTask) -> None:
    ref = _module(task.directory / "reference.py", f"k3s_register_{task.name}")
    for fn in ("make_inputs", "reference"):
        if not callable(getattr(ref, fn, None)):
            raise TaskRejected(f"reference.py defines no {fn}()")
    for shape in [task.timing.shape, *task.shapes]:
        inputs = ref.make_inputs(torch.Generator().manual_seed(1), **shape)
        if not isinstance(inputs, tuple) or not all(isinstance(x, torch.Tensor) for x in inputs):
            raise TaskRejected(f"make_inputs(**{shape}) must return a tuple of tensors")
        for fn in ("reference", "oracle"):
            if hasattr(ref, fn):
                out = getattr(ref, fn)(*(x.clone() for x in inputs))
                outs = out if isinstance(out, tuple | list) else (out,)
                if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
                    raise TaskRejected(f"{fn}() on shape {shape} must return tensors")
    task.roofline_work()
    for op in task.forbidden_ops:
        if not op.startswith("aten::") or not hasattr(torch.ops.aten, op.removeprefix("aten::")):
            raise TaskRejected(f"forbidden_ops: {op!r} is not an aten op")
    tree = ast.parse((task.directory / "expert.py").read_text(), "expert.py")
    if not any(isinstance(n, ast.FunctionDef) and n.name == task.entry_point for n in tree.body):
        raise TaskRejected(f"expert.py defines no {task.entry_point!r} (the task's entry point)")


def register_kernel_task(body: KernelTaskRegistration) -> KernelTask:
    try:
        task = KernelTask.model_validate(body.task)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise TaskRejected(f"task.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if taskdirs.find("kernel", TASKS_DIR, task.name) is not None:
        raise TaskExists(f"a kernel task {task.name!r} exists already")
    root = taskdirs.user_tasks_dir() / "kernel"
    scratch = root / f".new-{secrets.token_hex(6)}" / task.name
    scratch.mkdir(parents=True)
    try:
        import yaml

        (scratch / "task.yaml").write_text(yaml.safe_dump(body.task, sort_keys=False))
        (scratch / "reference.py").write_text(body.reference)
        (scratch / "expert.py").write_text(body.expert)
        try:
            loaded = load_task_dir(scratch)
            _exercise(loaded)
        except TaskRejected:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the user's code raises is the reason
            raise TaskRejected(f"{type(exc).__name__}: {exc}"[:2000]) from None
        final = root / task.name
        try:
            scratch.rename(final)
        except OSError:
            raise TaskExists(f"a kernel task {task.name!r} exists already") from None
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)
    return load_task_dir(final)
