"""The per-world lock holds across processes and only real conflicts are retried.

Two engines on one database stand for two workers or replicas: each read-modify-writes the
world's row through ``open_world`` (what every app call, MCP call and NPC does); with the
lock in the database no update is lost (PostgreSQL: the row ``FOR UPDATE``; SQLite: its write
lock, taken up front). A transient conflict is re-run; an ``IntegrityError`` surfaces at once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator

import psycopg.errors
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import IntegrityError, OperationalError

from services.tools.context import open_world
from services.tools.db import tools_database
from services.tools.models import WorldRow
from services.tools.serial import ATTEMPTS, is_conflict, retry_sync, world_route
from services.tools.worlds import service
from tests.shared.conftest import pg_url  # noqa: F401 - the fixture

ROUNDS = 15  # per writer


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tools.db'}"
    else:
        yield request.getfixturevalue("pg_url")


def test_two_engines_contending_on_one_world_lose_no_update(db_url: str):
    first, second = tools_database(db_url), tools_database(db_url)
    first.migrate()
    try:
        with first.session() as s:
            world, _ = service.create_world(s, "empty", 0)
            world_id, start = world.id, world.id_counter
            s.commit()
        errors: list[BaseException] = []

        def writer(db) -> None:  # type: ignore[no-untyped-def]
            try:
                for _ in range(ROUNDS):
                    with db.session() as s, open_world(s, world_id) as ctx:
                        seen = ctx.world.id_counter
                        time.sleep(0.002)  # another writer's read lands here without the lock
                        ctx.world.id_counter = seen + 1
                        s.commit()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(db,)) for db in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)
        with second.session() as s:
            assert s.get(WorldRow, world_id).id_counter == start + 2 * ROUNDS
    finally:
        first.close()
        second.close()


def _locked() -> OperationalError:
    return OperationalError("UPDATE x", {}, sqlite3.OperationalError("database is locked"))


def test_only_transient_conflicts_count_as_conflicts():
    assert is_conflict(_locked())
    serialization = psycopg.errors.SerializationFailure("could not serialize access")
    assert is_conflict(OperationalError("UPDATE x", {}, serialization))
    duplicate = sqlite3.IntegrityError("UNIQUE constraint failed: actions.seq")
    assert not is_conflict(IntegrityError("INSERT x", {}, duplicate))
    assert not is_conflict(ValueError("database is locked"))  # not from the database


def test_retry_sync_reruns_conflicts_and_surfaces_the_rest_at_once():
    calls: list[str] = []
    rollbacks: list[int] = []

    def flaky() -> str:
        calls.append("x")
        if len(calls) < 3:
            raise _locked()
        return "done"

    assert retry_sync(flaky, lambda: rollbacks.append(1)) == "done"
    assert len(calls) == 3 and len(rollbacks) == 2

    calls.clear()

    def duplicate() -> None:
        calls.append("x")
        raise IntegrityError("INSERT x", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))

    with pytest.raises(IntegrityError):
        retry_sync(duplicate, lambda: None)
    assert len(calls) == 1

    calls.clear()

    def always_locked() -> None:
        calls.append("x")
        raise _locked()

    with pytest.raises(OperationalError):
        retry_sync(always_locked, lambda: None)
    assert len(calls) == ATTEMPTS


def test_a_world_route_reruns_a_conflict_and_answers_an_integrity_error_at_once():
    calls = {"flaky": 0, "duplicate": 0}
    router = APIRouter(route_class=world_route())

    @router.post("/worlds/{world_id}/flaky")
    def flaky(world_id: str) -> dict[str, int]:
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise _locked()
        return calls

    @router.post("/worlds/{world_id}/duplicate")
    def duplicate(world_id: str) -> None:
        calls["duplicate"] += 1
        raise IntegrityError("INSERT x", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))

    app = FastAPI()
    app.include_router(router)
    client = TestClient(app, raise_server_exceptions=False)
    assert client.post("/worlds/w/flaky").json()["flaky"] == 3
    assert client.post("/worlds/w/duplicate").status_code == 500
    assert calls["duplicate"] == 1  # six times before: every IntegrityError was a "conflict"
