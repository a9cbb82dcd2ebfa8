"""The orchestrator's migrated tables match its models (SQLite and PostgreSQL), and episodes
recorded before the shared job model carry over onto it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from services.orchestrator.db import MIGRATIONS, open_database
from services.orchestrator.episode.models import Base, EpisodeRow
from services.orchestrator.episode.runner import EpisodeStore
from services.orchestrator.rollouts import models as _rollout_tables  # noqa: F401 - their tables in Base
from shared.db import migrate
from shared.jobs import JobPolicy
from tests.helpers.schema import schema_diffs
from tests.shared.conftest import pg_url  # noqa: F401 - the throwaway PostgreSQL database


def _check_tables_match_models(url: str) -> None:
    db = open_database(url)
    try:
        db.migrate()
        assert schema_diffs(db.engine, Base.metadata) == []
    finally:
        db.close()


def test_tables_match_models_on_sqlite(tmp_path) -> None:
    _check_tables_match_models(f"sqlite:///{tmp_path / 'o.db'}")


def test_tables_match_models_on_postgresql(pg_url) -> None:  # noqa: F811
    _check_tables_match_models(pg_url)


def test_episodes_from_before_the_job_model_carry_over(tmp_path) -> None:
    """A finished episode keeps its outcome; one left running (its worker gone) becomes a job
    the reaper re-queues; one whose cancel was pending is cancelled."""
    db = open_database(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        migrate(db.engine, MIGRATIONS, "orchestrator", revision="o0001")
        then = "2026-01-01 00:00:00.000000"
        with db.engine.begin() as conn:
            for id_, status, cancel in (("done", "succeeded", 0), ("busy", "running", 0),
                                        ("stop", "running", 1)):  # fmt: skip
                conn.execute(
                    text(
                        "INSERT INTO orchestrator_episodes (id, kind, status, created_at,"
                        " updated_at, request, state, progress, worker, attempts,"
                        " cancel_requested, resources_released, reward, result) VALUES"
                        " (:id, 'episode', :status, :t, :t, '{\"harness\": \"codex\"}', '{}',"
                        " 0.5, 'gone:1:1', 1, :cancel, 0, :reward, '{}')"
                    ),
                    {"id": id_, "status": status, "t": then, "cancel": cancel,
                     "reward": 1.0 if status == "succeeded" else None},
                )  # fmt: skip
        db.migrate()
        with db.session() as s:
            done, busy, stop = (s.get(EpisodeRow, i) for i in ("done", "busy", "stop"))
            assert (done.status, done.reward, done.request) == (
                "succeeded",
                1.0,
                {"harness": "codex"},
            )
            assert done.created_at == datetime(2026, 1, 1, tzinfo=UTC)
            assert busy.status == "running" and busy.owner == "gone:1:1" and busy.attempts == 1
            assert stop.status == "cancelled" and stop.cancel_requested
        store = EpisodeStore(
            db, policy=JobPolicy(lease_s=60.0),
            clock=lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=5),
        )  # fmt: skip
        assert [j.id for j in store.expire_lost()] == ["busy"]
        assert store.require("busy").status == "queued"
    finally:
        db.close()
