"""Two worker threads from a fresh start: the thread pool's first two tasks open the worker's
database at the same moment. They raced in an ``lru_cache``d Alembic upgrade
(``KeyError('script')``), the task was lost and its episode stayed ``queued`` for good; now the
worker migrates once before it takes a task and the handle is opened under a lock.

A real Celery worker (``--pool threads --concurrency 2``, as ``k3stack up`` starts it with
``K3STACK_ORCHESTRATOR__WORKERS=2``) over the embedded broker; 20 episodes queued before it
starts, each against a policy endpoint that answers at once, so every one ends."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fastapi import FastAPI

from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import TASK_NAME
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode
from shared.queue import make_celery, worker_argv
from tests.helpers.asgi import serve
from tests.helpers.servers import spawn
from tests.orchestrator.conftest import REPO, service_env

pytestmark = pytest.mark.timeout(300)
EPISODES = 20


def _done_at_once() -> FastAPI:
    """A chat endpoint whose every answer is a final one (the episode completes at step 1)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def complete() -> dict:
        return {
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Done."}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip

    return app


def test_two_worker_threads_from_a_fresh_start_leave_nothing_queued(
    tmp_path: Path, monkeypatch
) -> None:
    from services.orchestrator.db import open_database
    from shared.settings import get_settings

    urls = {
        "K3STACK_DATABASE_URL": f"sqlite:///{tmp_path}/orch.db",
        "K3STACK_BROKER_URL": f"sqla+sqlite:///{tmp_path}/broker.db",
        "K3STACK_RESULT_BACKEND": f"db+sqlite:///{tmp_path}/results.db",
    }
    for key, value in urls.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db = open_database(urls["K3STACK_DATABASE_URL"])
    db.migrate()
    sender = make_celery("orchestrator", get_settings())
    with serve(_done_at_once()) as policy_url:
        body = EpisodeCreate.model_validate({
            "task": {"instruction": "Say done."}, "harness": "codex",
            "policy": {"base_url": f"{policy_url}/v1", "model": "m"},
        })  # fmt: skip
        ids = [
            create_episode(db, body, lambda i: sender.send_task(
                TASK_NAME, args=[i], task_id=i, queue="orchestrator"))
            for _ in range(EPISODES)
        ]  # fmt: skip
        env = service_env(tmp_path / "data", **urls, K3STACK_TOOLS__URL="http://127.0.0.1:9",
                          K3STACK_MODEL__URL="http://127.0.0.1:9",
                          K3STACK_SANDBOX__URL="http://127.0.0.1:9")  # fmt: skip
        argv = [sys.executable, *worker_argv("orchestrator", concurrency=2, pool="threads")]
        with spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=120):
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                statuses = _statuses(db, ids)
                if not {"queued", "running"} & set(statuses.values()):
                    break
                time.sleep(0.5)
    statuses = _statuses(db, ids)
    assert set(statuses.values()) == {"succeeded"}, _errors(db, ids)
    db.close()


def _statuses(db, ids: list[str]) -> dict[str, str]:
    with db.session() as s:
        return {i: s.get(EpisodeRow, i).status for i in ids}


def _errors(db, ids: list[str]) -> dict[str, tuple]:
    with db.session() as s:
        rows = [s.get(EpisodeRow, i) for i in ids]
        return {r.id: (r.status, r.error_code, (r.error_message or "")[:200]) for r in rows}
