"""The verifier's job kinds come from one registry (``job_kinds``), not attribute lookups."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from celery import Celery

from services.verifier.tasks import register_tasks
from shared.jobs import JobStore

VERIFIER = Path(__file__).resolve().parents[2] / "services" / "verifier"


def _tasks():  # type: ignore[no-untyped-def]
    app = Celery("kinds-test")
    return register_tasks(app, JobStore(lambda: None, None))  # type: ignore[arg-type]


def test_every_kind_the_api_queues_is_registered_under_its_name() -> None:
    tasks = _tasks()
    queued = set(re.findall(r'_queue\(request, "(\w+)"', (VERIFIER / "api.py").read_text()))
    assert queued, "the API queues no kind by name any more: update this test"
    assert queued | {"echo"} <= set(tasks.by_kind)
    for kind, task in tasks.by_kind.items():
        assert tasks.for_kind(kind) is task
        assert task.name == f"verifier.{kind}"
    assert tasks.echo is tasks.by_kind["echo"]


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown job kind 'for_kind'; known: \['echo'"):
        _tasks().for_kind("for_kind")


def test_no_kind_is_dispatched_by_attribute_name() -> None:
    for path in VERIFIER.rglob("*.py"):
        assert not re.search(r"getattr\(\s*self\s*,\s*kind", path.read_text()), path
