"""Rollouts over the real tools and sandbox services with a scripted token-id endpoint:
λ = 0.5 over 8 samples (2 tasks x K=4, each task one setup forked 4 times) pauses the
unfinished half, which resumes first in the next iteration with the same files, world hash and
conversation; its token ids equal an uninterrupted run's; exports validate; an over-budget
trajectory is cut with reward -1."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from services.orchestrator.rollouts.export import export_lines
from services.orchestrator.rollouts.models import RolloutRow, SampleRow, SetupRow
from services.orchestrator.rollouts.schema import RolloutCreate, RolloutIterate
from services.orchestrator.rollouts.service import create_rollout, iterate, rollout_view
from services.orchestrator.rollouts.tasks import run_inline
from shared.clients import SandboxClient
from shared.trajectory.atif import validate_atif
from tests.helpers.asgi import serve
from tests.helpers.servers import _on_free_port
from tests.orchestrator.conftest import REPO, service_env
from tests.orchestrator.rollout_endpoint import endpoint

SHORT = {"scenario": "empty", "sandbox_template": "busybox", "instruction": "Say done. turns=1"}
LONG = {"scenario": "empty", "sandbox_template": "busybox", "instruction": "Take notes. turns=5"}


@pytest.fixture(scope="module")
def sandbox_url(tmp_path_factory) -> str:
    data = tmp_path_factory.mktemp("sandbox-svc")
    env = service_env(data, K3STACK_SANDBOX__RUNTIME="process")
    with _on_free_port(
        lambda port: [sys.executable, "-m", "services.sandbox", "--port", str(port)],
        url_template="http://127.0.0.1:{port}", env=env, cwd=str(REPO), timeout=120.0,
    ) as server:  # fmt: skip
        yield server.url


def _request(url: str, tasks: list[dict], k: int, lam: float, **extra) -> RolloutCreate:
    return RolloutCreate.model_validate({
        "tasks": tasks, "samples_per_task": k, "harness": "codex", "lam": lam,
        "policy": {"base_url": url, "version": "v1", "temperature": 0.0, "seed": 7},
        "budgets": {"max_steps": 12}, **extra,
    })  # fmt: skip


def _run_all(db, services, ids: list[str]) -> None:
    threads = [threading.Thread(target=run_inline, args=(db, services, i)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads)


def _sample(db, sid: str) -> SampleRow:
    with db.session() as s:
        row = s.get(SampleRow, sid)
        s.expunge(row)
        return row


def _records(db, rid: str) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, export_lines(db, rid, "jsonl"))}


def test_lambda_half_pauses_and_resumes_identically(orch_db, services, sandbox_url) -> None:
    services.sandbox = SandboxClient(sandbox_url, timeout=120.0)
    queued: list[str] = []
    at_turn_2: list[int] = []  # one entry per long sample's request at its third turn

    def gate(turn: int, instruction: str) -> None:
        """Long samples wait at their third turn for the λ pause; short ones wait until every
        long one is there, so the pause (when the short half finishes) finds each long sample
        at step 2, however slowly the machine starts them."""
        deadline = time.monotonic() + 120
        if "turns=5" in instruction and turn >= 2:
            at_turn_2.append(turn)
            while time.monotonic() < deadline:
                with orch_db.session() as s:
                    if s.get(RolloutRow, rid).pause_iteration >= 1:
                        return
                time.sleep(0.05)
        elif "turns=1" in instruction:
            while len(at_turn_2) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)

    with serve(endpoint(gate)) as url:
        body = _request(f"{url}/v1", [SHORT, LONG], k=4, lam=0.5)
        rid = create_rollout(orch_db, body, queued.append, "rollouts")
        assert len(queued) == 8
        _run_all(orch_db, services, list(queued))
        view = rollout_view(orch_db, rid)
        assert view.counts == {"finished": 4, "paused": 4}, view.counts
        long_ids = [v.id for v in view.samples if v.task_index == 1]
        assert {v.phase for v in view.samples if v.task_index == 1} == {"paused"}
        with orch_db.session() as s:  # one setup per task, K forks of it
            setups = s.query(SetupRow).filter_by(rollout_id=rid).all()
            assert len(setups) == 2
            worlds = {s.get(SampleRow, i).world_id for i in long_ids}
            assert len(worlds) == 4 and setups[1].world_id not in worlds
        before = {i: _sample(orch_db, i) for i in long_ids}
        for row in before.values():
            assert row.paused["files"] and row.paused["world_hash"]
            assert row.state["step"] >= 2

        resumed: list[str] = []
        iterate(orch_db, rid, RolloutIterate.model_validate(
            {"policy": {"base_url": f"{url}/v1", "version": "v2", "temperature": 0.0, "seed": 7},
             "lam": 1.0}), resumed.append)  # fmt: skip
        assert sorted(resumed) == sorted(long_ids)  # the paused ones, first
        _run_all(orch_db, services, resumed)
        view = rollout_view(orch_db, rid)
        assert view.counts == {"finished": 8}, view.counts
        for sid in long_ids:
            after = _sample(orch_db, sid)
            assert after.paused["resumed_files"] == before[sid].paused["files"]
            assert after.paused["resumed_world_hash"] == before[sid].paused["world_hash"]
            n = len(before[sid].state["messages"])
            assert after.state["messages"][:n] == before[sid].state["messages"]
            spans = next(v for v in view.samples if v.id == sid).versions
            assert [s.version for s in spans] == ["v1", "v2"]
            assert spans[0].end == spans[1].start
        records = _records(orch_db, rid)

        # The reference: the same long task, uninterrupted, under one version.
        ref_id = create_rollout(orch_db, _request(f"{url}/v1", [LONG], k=1, lam=1.0),
                                lambda _i: None, "rollouts")  # fmt: skip
        run_inline(orch_db, services, f"{ref_id}_0_0")
        ref = _records(orch_db, ref_id)[f"{ref_id}_0_0"]
    assert ref["phase"] == "finished" and ref["steps"] == 5
    for sid in long_ids:
        got = records[sid]
        assert got["tokens"]["ids"] == ref["tokens"]["ids"]  # token for token
        assert [b["completion_start"] for b in got["segments"]] == [
            b["completion_start"] for b in ref["segments"]
        ]
        assert got["tokens"]["loss_mask"] == ref["tokens"]["loss_mask"]
        assert got["messages"] == ref["messages"]


def test_effort_budget_cuts_and_exports_validate(orch_db, services) -> None:
    with serve(endpoint(long_text=200)) as url:
        tasks = [{"instruction": "Answer at length. turns=1"}, {"instruction": "Be brief. turns=1"}]
        body = _request(f"{url}/v1", tasks, k=1, lam=1.0,
                        effort="low", **{"budgets": {"max_steps": 4,
                                                     "effort_budgets": {"low": 150}}})  # fmt: skip
        rid = create_rollout(orch_db, body, lambda _i: None, "rollouts")
        for i in range(2):
            run_inline(orch_db, services, f"{rid}_{i}_0")
    view = rollout_view(orch_db, rid)
    cut, ok = view.samples
    assert cut.phase == "cut" and cut.reward == -1.0 and cut.exit_reason == "effort_budget"
    assert ok.phase == "finished" and ok.completion_tokens <= 150
    lines = list(export_lines(orch_db, rid, "jsonl"))
    assert len(lines) == 2
    rec = json.loads(lines[0])
    toks = rec["tokens"]
    assert len(toks["ids"]) == len(toks["loss_mask"]) == len(toks["logprobs"])
    assert sum(toks["loss_mask"]) == cut.completion_tokens
    assert {v for v, m in zip(toks["versions"], toks["loss_mask"], strict=True) if m} == {"v1"}
    assert rec["reward"] == -1.0
    for line in export_lines(orch_db, rid, "atif"):
        doc = json.loads(line)
        validate_atif(doc)
        agent = [s for s in doc["steps"] if s["source"] == "agent"]
        assert agent and all(s["metrics"]["completion_token_ids"] for s in agent)


@pytest.mark.slow
def test_sigkilled_worker_loses_nothing_on_redis(
    orch_db, services, sandbox_url, tools_url, tmp_path
) -> None:
    """Deployed mode: a real Celery worker on the real Redis broker is SIGKILLed mid-batch; the
    reaper re-queues its sample, a second worker finishes the batch, and every side-effecting
    call (apply_patch in the sandbox) ran exactly once."""
    import os
    import signal
    import uuid

    from services.orchestrator.episode.models import ToolCallRow
    from services.orchestrator.rollouts.service import TASK_NAME, SampleStore, reap_samples
    from shared.jobs import JobPolicy
    from shared.queue import make_celery, worker_argv
    from shared.settings import load_settings
    from tests.helpers.servers import spawn

    services.sandbox = SandboxClient(sandbox_url, timeout=120.0)
    queue_name = f"rollouts-test-{uuid.uuid4().hex[:8]}"
    env = service_env(
        tmp_path / "worker-data",
        K3STACK_DATABASE_URL=str(orch_db.engine.url),
        K3STACK_BROKER_URL="redis://127.0.0.1:6379/11",
        K3STACK_RESULT_BACKEND="redis://127.0.0.1:6379/11",
        K3STACK_TOOLS__URL=tools_url,
        K3STACK_SANDBOX__URL=sandbox_url,
        K3STACK_MODEL__URL="http://127.0.0.1:9",
        K3STACK_ORCHESTRATOR__LEASE_S="2",
        K3STACK_ORCHESTRATOR__ROLLOUT_QUEUE=queue_name,
    )
    app = make_celery("orchestrator", load_settings(broker_url=env["K3STACK_BROKER_URL"],
                                                    result_backend=env["K3STACK_RESULT_BACKEND"]))  # fmt: skip

    def enqueue(sample_id: str) -> None:
        app.send_task(TASK_NAME, args=[sample_id], task_id=sample_id, queue=queue_name)

    argv = [sys.executable, *worker_argv("orchestrator", 1, "solo", [queue_name])]
    # long enough samples that one is still live when the worker is killed, on a loaded host too
    turns = 10
    task = {"sandbox_template": "busybox", "instruction": f"Take notes. turns={turns}"}

    def steps() -> dict[str, tuple[str, int]]:
        with orch_db.session() as s:
            rows = s.query(SampleRow).filter_by(rollout_id=rid).all()
            return {r.id: (r.phase, (r.state or {}).get("step", 0)) for r in rows}

    def wait(pred, what: str, timeout: float = 200.0):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not (value := pred()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)
        return value

    with serve(endpoint()) as url:
        body = _request(f"{url}/v1", [task], k=3, lam=1.0)
        rid = create_rollout(orch_db, body, enqueue, queue_name)
        with spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=120) as first:
            wait(lambda: any(st >= 2 for _, st in steps().values()), "a sample's second step")
            os.killpg(first.pgid, signal.SIGKILL)
            first.proc.wait(timeout=30)
        killed = steps()
        assert any(ph == "live" for ph, _ in killed.values())
        store = SampleStore(orch_db, policy=JobPolicy(heartbeat_s=0.5, lease_s=2.0))
        with spawn(argv, env=env, cwd=REPO, ready_text=" ready.", timeout=120):
            wait(lambda: reap_samples(orch_db, enqueue, store), "the lease to lapse")
            wait(lambda: all(ph == "finished" for ph, _ in steps().values()), "the batch")
    with orch_db.session() as s:
        calls = s.query(ToolCallRow).filter(ToolCallRow.episode_id.like(f"{rid}%")).all()
        assert len(calls) == 3 * (turns - 1)  # 3 samples x their apply_patch turns
        assert {c.runs for c in calls} == {1}
        assert max(s.get(SampleRow, i).attempts for i in killed) == 2
    for rec in _records(orch_db, rid).values():
        assert rec["steps"] == turns and rec["phase"] == "finished"
