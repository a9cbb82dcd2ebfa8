"""Templates: the built-in images and the ones built from steps, as rows in SQL.

A template names an image of a runtime's image builder. Built-ins (``busybox``, ``debian``) run on
any runtime; a built template belongs to the runtime that built it. Builds run in the background
(``build`` returns at once with ``buildStatus: building``); their logs land on the row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from sqlalchemy import select

from services.sandbox.lifecycle.errors import Conflict, NotFound, runtime_errors
from services.sandbox.lifecycle.runtimes import pick_runtime
from services.sandbox.lifecycle.views import aware as _aware
from services.sandbox.models import SandboxRow, TemplateRow
from services.sandbox.runtime.base import Runtime
from shared.contracts.sandbox import NewTemplate, Template, TemplateStep
from shared.db import ServiceDatabase

log = logging.getLogger("k3stack.sandbox")

BUILTIN_TEMPLATES = ("busybox", "debian")


class TemplateCatalog:
    """Template rows and builds. ``default_runtime`` is the settings' runtime choice."""

    def __init__(
        self, *, db: ServiceDatabase, runtimes: dict[str, Runtime], default_runtime: str,
        clock: Callable[[], datetime],
    ) -> None:  # fmt: skip
        self.db = db
        self.runtimes = runtimes
        self.default_runtime = default_runtime
        self.clock = clock
        self._builds = ThreadPoolExecutor(2, thread_name_prefix="k3stack-template")

    def close(self) -> None:
        self._builds.shutdown(wait=True, cancel_futures=False)

    def seed(self) -> None:
        now = self.clock()
        with self.db.session() as s:
            for name in BUILTIN_TEMPLATES:
                if s.get(TemplateRow, name) is None:
                    s.add(
                        TemplateRow(
                            id=name, runtime="any", base=None, steps=[], status="ready",
                            builtin=True, cpu_count=1, memory_mb=256, created_at=now,
                            updated_at=now, spawn_count=0, logs=[], error=None, image={},
                        )
                    )  # fmt: skip

    def ready(self, template_id: str) -> TemplateRow:
        with self.db.session() as s:
            row = s.get(TemplateRow, template_id)
            if row is None:
                raise NotFound.of("template", template_id)
            if row.status != "ready":
                raise Conflict("template_not_ready",
                    f"template {template_id!r} is {row.status}"
                    + (f": {row.error}" if row.error else ""),
                )  # fmt: skip
            s.expunge(row)
            return row

    @staticmethod
    def view(row: TemplateRow) -> Template:
        return Template(
            templateID=row.id, runtime=row.runtime,
            buildStatus=row.status,  # type: ignore[arg-type]
            builtin=row.builtin, fromTemplate=row.base,
            steps=[TemplateStep.model_validate(x) for x in row.steps or []],
            cpuCount=row.cpu_count, memoryMB=row.memory_mb,
            createdAt=_aware(row.created_at),  # type: ignore[arg-type]
            updatedAt=_aware(row.updated_at),  # type: ignore[arg-type]
            spawnCount=row.spawn_count, logs=list(row.logs or [])[-200:], error=row.error,
        )  # fmt: skip

    def list(self) -> list[Template]:
        with self.db.session() as s:
            rows = s.scalars(select(TemplateRow).order_by(TemplateRow.created_at)).all()
            return [self.view(r) for r in rows]

    def get(self, template_id: str) -> Template:
        with self.db.session() as s:
            row = s.get(TemplateRow, template_id)
            if row is None:
                raise NotFound.of("template", template_id)
            return self.view(row)

    def build(self, req: NewTemplate) -> Template:
        """Record the template and build it in the background; poll ``GET /templates/{id}``."""
        base = req.fromTemplate or "busybox"
        base_row = self.ready(base)
        requested = req.runtime
        if base_row.runtime != "any":
            requested = base_row.runtime
        with runtime_errors():
            rt = pick_runtime(requested, self.default_runtime, self.runtimes)
        builder = getattr(rt, "build_image", None)
        if builder is None:
            raise Conflict("unsupported", f"runtime {rt.name!r} has no image builder")
        now = self.clock()
        with self.db.session() as s:
            existing = s.get(TemplateRow, req.name)
            if existing is not None:
                if existing.builtin or existing.status == "building":
                    raise Conflict("conflict", f"template {req.name!r} is {'built-in' if existing.builtin else 'building'}"
                    )  # fmt: skip
                s.delete(existing)
                s.flush()
            s.add(
                TemplateRow(
                    id=req.name, runtime=rt.name, base=base,
                    steps=[st.model_dump() for st in req.steps], status="building",
                    builtin=False, cpu_count=req.cpuCount, memory_mb=req.memoryMB,
                    created_at=now, updated_at=now, spawn_count=0, logs=[], error=None, image={},
                )
            )  # fmt: skip
        self._builds.submit(
            self._run_build, req.name, rt, base, [st.model_dump() for st in req.steps]
        )
        return self.get(req.name)

    def _run_build(self, name: str, rt: Runtime, base: str, steps: list[dict[str, Any]]) -> None:
        lines: list[str] = []
        last_flush = [time.monotonic()]

        def say(line: str) -> None:
            lines.append(line)
            if time.monotonic() - last_flush[0] > 0.5:
                last_flush[0] = time.monotonic()
                with self.db.session() as s:
                    row = s.get(TemplateRow, name)
                    if row is not None:
                        row.logs = lines[-500:]

        try:
            image = rt.build_image(name, base, steps, say)  # type: ignore[attr-defined]
            status, error = "ready", None
        except Exception as exc:  # noqa: BLE001 - a failed build is a template in state error
            log.warning("template %s failed: %s", name, exc)
            image, status, error = {}, "error", str(exc)
        with self.db.session() as s:
            row = s.get(TemplateRow, name)
            if row is not None:
                row.status, row.error, row.image = status, error, image or {}
                row.logs = lines[-500:]
                row.updated_at = self.clock()

    def delete(self, template_id: str) -> None:
        with self.db.session() as s:
            row = s.get(TemplateRow, template_id)
            if row is None:
                raise NotFound.of("template", template_id)
            if row.builtin:
                raise Conflict("conflict", f"template {template_id!r} is built in")
            if row.status == "building":
                raise Conflict("conflict", f"template {template_id!r} is still building")
            users = s.scalars(
                select(SandboxRow.id).where(
                    SandboxRow.template_id == template_id,
                    SandboxRow.state.in_(("running", "paused", "creating")),
                )
            ).all()
            if users:
                raise Conflict("conflict",
                    f"template {template_id!r} is used by {len(users)} sandbox(es), e.g. {users[0]}",
                )  # fmt: skip
            rt = self.runtimes.get(row.runtime)
            s.delete(row)
        deleter = getattr(rt, "delete_image", None) if rt else None
        if deleter is not None:
            deleter(template_id)
