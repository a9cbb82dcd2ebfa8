"""The verifier's API: jobs per kind on their own queues, results in SQL and the object store,
bad input answered with a 4xx naming the problem. Eager Celery runs each job in the request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from services.verifier.kernel.spec import TASKS_DIR
from services.verifier.submission.tasks import BlackBoxFunction
from shared.settings import get_settings
from tests.verifier.conftest import candidate


@pytest.fixture
def client(tmp_path, monkeypatch) -> Iterator[TestClient]:
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("K3STACK_DATABASE_URL", raising=False)
    monkeypatch.delenv("K3STACK_OBJECT_STORE_URL", raising=False)
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
    monkeypatch.setenv("K3STACK_CELERY_EAGER", "true")
    get_settings.cache_clear()
    from services.verifier.app import create_app

    with TestClient(create_app()) as c:
        yield c
    get_settings.cache_clear()


def _queue(client: TestClient, job_id: str) -> str | None:
    return client.app.state.jobs.task_of(job_id)[1]


def _files(path) -> dict[str, str]:
    return {path.name: path.read_text()}


@pytest.mark.slow
def test_kernel_job_runs_and_persists(client: TestClient) -> None:
    body = {
        "task": "softmax",
        "files": _files(TASKS_DIR / "softmax" / "expert.py"),
        "timing": {"trials": 3, "iterations": 1, "warmups": 1},
    }
    resp = client.post("/verify/kernel", json=body)
    assert resp.status_code == 202, resp.text
    job = client.get(f"/jobs/{resp.json()['id']}").json()
    assert job["status"] == "succeeded", job
    assert job["kind"] == "kernel" and _queue(client, job["id"]) == "verifier.kernel"
    result = job["result"]
    assert result["correct"] and result["detectors"] == [] and "reward_formula" in result
    from shared.objectstore import make_object_store

    store = make_object_store(get_settings())
    assert set(result["artefacts"]) == {
        f"verifier/jobs/{job['id']}/candidate/expert.py",
        f"verifier/jobs/{job['id']}/result.json",
    }
    with store.open(result["artefacts"][0]) as f:
        assert b"def softmax" in f.read()


def test_kernel_cheat_is_a_result_with_reward_zero(client: TestClient) -> None:
    body = {"task": "softmax", "files": _files(candidate("softmax", "library_call"))}
    job = client.get(f"/jobs/{client.post('/verify/kernel', json=body).json()['id']}").json()
    assert job["status"] == "succeeded"
    assert job["result"]["reward"] == 0.0
    assert "reference_library_call" in {d["detector"] for d in job["result"]["detectors"]}


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (
            {"task": "nope", "files": {"c.py": "def softmax(x):\n    return x\n"}},
            404,
            "no kernel task 'nope'",
        ),
        (
            {"task": "softmax", "files": {"c.py": "def other(x):\n    return x\n"}},
            422,
            "defines no 'softmax'",
        ),
        ({"task": "softmax", "files": {"../c.py": "x = 1\n"}}, 400, "relative .py path"),
        ({"task": "softmax", "files": {}}, 400, "files"),
        ({"task": "softmax"}, 400, "files"),
        (
            {
                "task": "softmax",
                "files": {"c.py": "def softmax(x): return x"},
                "timing": {"trials": 1},
            },
            400,
            "trials",
        ),
    ],
)
def test_bad_kernel_input_is_a_4xx_naming_the_problem(
    client: TestClient, body, status, needle
) -> None:
    resp = client.post("/verify/kernel", json=body)
    assert resp.status_code == status, resp.text
    assert needle in resp.text
    assert client.get("/jobs").json()["items"] == []  # nothing was queued


def test_submission_loop_over_the_api(client: TestClient) -> None:
    resp = client.post("/submission/sessions", json={"task": "blackbox_function"})
    assert resp.status_code == 201, resp.text
    sid = resp.json()["id"]
    assert "hidden_seed" not in resp.text
    for i in range(BlackBoxFunction.max_submissions):
        r = client.post(
            f"/submission/sessions/{sid}/submit",
            json={"submission": {"expression": "x", "probes": [i]}},
        )
        assert r.status_code == 200, r.text
        assert "hidden_seed" not in r.text
    r = client.post(f"/submission/sessions/{sid}/submit", json={"submission": {"expression": "x"}})
    assert r.status_code == 409 and "budget" in r.text
    bad = client.post(
        f"/submission/sessions/{sid}/submit", json={"submission": {"expression": "import os"}}
    )
    assert bad.status_code in (409, 422)
    job = client.post("/verify/submission", json={"session_id": sid})
    assert job.status_code == 202, job.text
    got = client.get(f"/jobs/{job.json()['id']}").json()
    assert got["status"] == "succeeded" and _queue(client, got["id"]) == "verifier.submission"
    penalty = (
        BlackBoxFunction.max_submissions - BlackBoxFunction.free_submissions
    ) * BlackBoxFunction.penalty_per_extra
    assert got["result"]["penalty"] == pytest.approx(penalty)
    assert set(got["result"]) == {"hidden_score", "submissions_used", "penalty", "reward"}
    assert client.post("/verify/submission", json={"session_id": sid}).status_code == 409
    assert client.get(f"/submission/sessions/{sid}").json()["final"]["penalty"] == pytest.approx(
        penalty
    )


def test_submission_bad_input(client: TestClient) -> None:
    assert client.post("/submission/sessions", json={"task": "nope"}).status_code == 404
    assert client.get("/submission/sessions/nope").status_code == 404
    assert client.post("/verify/submission", json={"session_id": "nope"}).status_code == 404
    sid = client.post("/submission/sessions", json={"task": "heldout_factor"}).json()["id"]
    r = client.post(f"/submission/sessions/{sid}/submit", json={"submission": {"weights": [1]}})
    assert r.status_code == 422 and "12 numbers" in r.text
    r = client.post("/verify/submission", json={"session_id": sid})
    assert r.status_code == 422 and "nothing to verify" in r.text


def test_judge_and_world_jobs_fail_clearly_without_a_model_or_world(
    client: TestClient, monkeypatch
) -> None:
    from tests.verifier.scripted_llm import scripted_llm

    with scripted_llm(lambda s, u: "no json") as llm:
        monkeypatch.setenv("K3STACK_LLM_URL", llm.url)
        get_settings.cache_clear()
        body = {"task": "t", "candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]}
        job = client.get(f"/jobs/{client.post('/judge', json=body).json()['id']}").json()
    assert job["status"] == "failed" and "no JSON" in job["error"]["message"], job
    assert _queue(client, job["id"]) == "verifier.judge"
    assert client.post("/judge", json={"task": "t", "candidates": []}).status_code == 400
    assert client.post("/verify/world", json={}).status_code == 400


def test_task_list(client: TestClient) -> None:
    tasks = client.get("/verify/tasks").json()
    assert "kda_step" in tasks["kernel"] and "heldout_factor" in tasks["submission"]
