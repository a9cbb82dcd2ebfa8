"""``K3STACK_ORCHESTRATOR__QUEUE`` renames the queue the worker consumes, and episodes are sent
there (the message lands on the renamed queue of the real embedded broker, none on the
default one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.orchestrator.conftest import REPO, service_env

PROBE = """
import json
from services.orchestrator.tasks import celery, enqueue_episode
enqueue_episode("ep_queue_probe")
with celery.connection_for_read() as conn:
    ch = conn.default_channel
    counts = {q: ch.queue_declare(queue=q, passive=False).message_count
              for q in ("episodes_blue", "orchestrator")}
print(json.dumps({"counts": counts}))
"""


def test_episodes_go_to_the_renamed_queue(tmp_path: Path) -> None:
    env = service_env(tmp_path, K3STACK_ORCHESTRATOR__QUEUE="episodes_blue")
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    body = json.loads(out.stdout.strip().splitlines()[-1])
    assert body["counts"] == {"episodes_blue": 1, "orchestrator": 0}


def test_one_celery_app_module_and_no_import_circle(tmp_path: Path) -> None:
    """The sample task's body imports neither Celery app module (no circle hidden behind a
    late E402 import); the one app module registers both job tasks."""
    probe = (
        "import sys\n"
        "import services.orchestrator.rollouts.tasks\n"
        "assert 'services.orchestrator.tasks' not in sys.modules, 'circle'\n"
        "from services.orchestrator.tasks import celery\n"
        "print(sorted(n for n in celery.tasks if n.startswith('orchestrator.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=service_env(tmp_path),
                         cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "orchestrator.run_episode" in out.stdout and "run_rollout_sample" in out.stdout
    source = (REPO / "services" / "orchestrator" / "tasks.py").read_text()
    assert "E402" not in source
