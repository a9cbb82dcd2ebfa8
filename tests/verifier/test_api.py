"""The verifier's API: jobs per kind on their own queues, results in SQL and the object store,
bad input answered with a 4xx naming the problem. Eager Celery runs each job in the request."""

from __future__ import annotations

import json
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


JSON = {"content-type": "application/json"}


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


def test_judge_without_a_judge_model_is_refused_at_once(client: TestClient) -> None:
    body = {"task": "t", "candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]}
    resp = client.post("/judge", json=body)
    assert resp.status_code == 422 and "JUDGE_MODEL" in resp.text, resp.text
    web = {"task": "counter_todo", "files": {"index.html": "<p>x</p>"}, "judge": True}
    resp = client.post("/verify/web", json=web)
    assert resp.status_code == 422 and "judge" in resp.json()["message"], resp.text
    assert client.get("/jobs").json()["items"] == []  # nothing was queued


def test_judge_with_a_scripted_endpoint_runs_on_its_queue(client: TestClient, monkeypatch) -> None:
    from tests.verifier.scripted_llm import scripted_llm

    def reply(system: str, user: str) -> str:
        if "grading rubric" in system:
            return '{"criteria": [{"name": "right", "weight": 1}]}'
        return '{"scores": {"right": 7}}'

    with scripted_llm(reply) as llm:
        monkeypatch.setenv("K3STACK_LLM_URL", llm.url)
        monkeypatch.setenv("K3STACK_VERIFIER__JUDGE_MODEL", "scripted-judge")
        get_settings.cache_clear()
        body = {"task": "t", "candidates": [{"id": "a", "text": "yes"}, {"id": "b", "text": "no"}],
                "mode": "pointwise"}  # fmt: skip
        job = client.get(f"/jobs/{client.post('/judge', json=body).json()['id']}").json()
        assert {r["model"] for r in llm.requests} == {"scripted-judge"}
    assert job["status"] == "succeeded", job
    assert _queue(client, job["id"]) == "verifier.judge"
    assert client.post("/judge", json={"task": "t", "candidates": []}).status_code == 400


def test_a_judge_that_never_answers_ends_the_job_judge_no_answer(
    client: TestClient, monkeypatch
) -> None:
    from tests.verifier.scripted_llm import scripted_llm

    with scripted_llm(lambda system, user: "") as llm:
        monkeypatch.setenv("K3STACK_LLM_URL", llm.url)
        monkeypatch.setenv("K3STACK_VERIFIER__JUDGE_MODEL", "scripted-judge")
        get_settings.cache_clear()
        body = {"task": "t", "candidates": [{"id": "a", "text": "yes"}], "mode": "pointwise"}
        job = client.get(f"/jobs/{client.post('/judge', json=body).json()['id']}").json()
    assert job["status"] == "failed", job
    assert job["error"]["code"] == "judge_no_answer" and "empty answer" in job["error"]["message"]
    assert len(llm.requests) == 2  # asked once more, then the named outcome


def test_world_ids_are_checked_at_submit(client: TestClient, monkeypatch) -> None:
    from services.tools.app import create_app as tools_app
    from tests.helpers.asgi import serve

    with serve(tools_app()) as url:
        monkeypatch.setenv("K3STACK_TOOLS__URL", url)
        get_settings.cache_clear()
        resp = client.post("/verify/world", json={"world_id": "nope"})
    assert resp.status_code == 404 and "world_id" in resp.text, resp.text
    assert client.post("/verify/world", json={}).status_code == 400
    assert client.get("/jobs").json()["items"] == []


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"binary_files": {"logo.png": "not base64!"}}, "not valid base64"),
        ({"files": {"index.html": "x" * (21 << 20)}}, "at most"),
        ({"binary_files": {"big.bin": "QUFB" * (7 << 20)}}, "at most"),
        ({"files": {"../index.html": "x"}}, "relative path"),
        ({"files": {"app": "x", "app/index.html": "y"}}, "files['app']: a file of that name"),
        ({"binary_files": {"a.html/logo.png": "QUFB"}}, "files + binary_files['a.html']"),
        ({"binary_files": {"a.html": "QUFB"}}, "binary_files['a.html']: also a name"),
        ({"files": {"n" * 300 + ".html": "x"}}, "at most 255 per folder or file name"),
        ({"files": {"d\ud800.html": "x"}}, "not valid UTF-8"),
        ({"files": {"index.html": "a\ud800b"}}, "files['index.html']: character 1"),
        ({"files": {"./a.html": "x"}}, "relative path without"),
        ({"files": {"index.html": "x" * (30 << 20)}}, "files + binary_files: the request body"),
    ],
)
def test_bad_web_input_is_refused_at_the_door(client: TestClient, body, needle) -> None:
    web = {"task": "counter_todo", "files": {"a.html": "x"}, **body}
    # raw JSON: a lone surrogate cannot pass through the client's own UTF-8 encoding
    resp = client.post("/verify/web", content=json.dumps(web).replace("\\\\u", "\\u"),
                       headers={"content-type": "application/json"})  # fmt: skip
    assert resp.status_code in (400, 413) and needle in resp.text, resp.text[:300]
    assert client.get("/jobs").json()["items"] == []


def test_raw_bytes_in_surrogateescape_form_are_still_a_web_upload(client: TestClient) -> None:
    """U+DC80..U+DCFF stand for raw bytes (what a surrogateescape decoder makes): written back
    as those bytes, not refused; only surrogates with no byte to stand for are."""
    from services.verifier.bodies import WebJobInput

    app = WebJobInput(task="counter_todo", files={"a.html": "caf\udce9"})
    assert app.files["a.html"].encode("utf-8", "surrogateescape") == b"caf\xe9"


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ({"candidate.py": "x = 1\n", "candidate.py/x.py": "y = 2\n"}, "files['candidate.py']"),
        ({"k" * 300 + ".py": "def softmax(x): return x\n"}, "at most 255"),
        ({"c\ud800.py": "def softmax(x): return x\n"}, "not valid UTF-8"),
        ({"c.py": "def softmax(x): return x  # \ud800\n"}, "files['c.py']: character"),
        ({"c.py": "def softmax(x): return x\n" + "#" * (10 << 20)}, "files: the request body"),
    ],
)
def test_kernel_uploads_the_file_system_would_refuse_are_a_4xx(
    client: TestClient, files, needle
) -> None:
    raw = json.dumps({"task": "softmax", "files": files}).replace("\\\\u", "\\u")
    resp = client.post("/verify/kernel", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code in (400, 413) and needle in resp.text, resp.text[:300]
    assert client.get("/jobs").json()["items"] == []


def test_an_oversized_body_is_refused_before_it_is_read() -> None:
    """A chunked body (no Content-Length) is read only to just past the cap, then 413: the
    rest of a huge upload is never waited for, parsed or held."""
    import asyncio

    from services.verifier.uploads import BodyCap

    async def app(scope, receive, send) -> None:  # pragma: no cover - never reached
        raise AssertionError("the app saw an oversized body")

    chunks, sent = iter([b"x" * 1000] * 1000), []

    async def receive() -> dict:
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/verify/web", "headers": []}
    cap = BodyCap(app, caps={"/verify/web": (5_500, "files + binary_files")}, default=(1, "body"))
    asyncio.run(cap(scope, receive, send))
    assert sent[0]["status"] == 413 and b"files + binary_files" in sent[1]["body"]
    assert len(list(chunks)) == 1000 - 6  # six chunks read: the first past 5,500 bytes


def _new_task(name: str, **change) -> dict:
    import yaml

    task = yaml.safe_load((TASKS_DIR / "softmax" / "task.yaml").read_text())
    task.update(name=name, **change)
    return {
        "task": task,
        "reference": (TASKS_DIR / "softmax" / "reference.py").read_text(),
        "expert": (TASKS_DIR / "softmax" / "expert.py").read_text(),
    }


def test_a_kernel_task_registered_through_the_api_is_listed_and_loads(client: TestClient) -> None:
    resp = client.post("/verify/kernel/tasks", json=_new_task("my_softmax"))
    assert resp.status_code == 201, resp.text
    assert "my_softmax" in client.get("/verify/tasks").json()["kernel"]
    from services.verifier.kernel.spec import load_task

    task = load_task("my_softmax")
    assert (task.directory / "expert.py").is_file() and task.directory.parent.name == "kernel"
    again = client.post("/verify/kernel/tasks", json=_new_task("my_softmax"))
    assert again.status_code == 409
    assert client.post("/verify/kernel/tasks", json=_new_task("softmax")).status_code == 409
    body = {"task": "my_softmax", "files": {"c.py": "def other(x):\n    return x\n"}}
    assert client.post("/verify/kernel", json=body).status_code == 422


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"reference": "def reference(x):\n    return x\n"}, "no make_inputs"),
        ({"reference": "import torch\nraise ImportError('broken')\n"}, "broken"),
        ({"expert": "def other(x):\n    return x\n"}, "defines no 'softmax'"),
        ({"task": {"forbidden_ops": ["aten::no_such_op"]}}, "not an aten op"),
        ({"task": {"shapes": []}}, "task.shapes"),
        ({"task": {"roofline": {"flops": "__import__('os')", "bytes": 1}}}, "only numbers"),
    ],
)
def test_a_task_that_fails_to_load_is_refused_with_its_error(
    client: TestClient, change, needle
) -> None:
    body = _new_task("broken_task")
    for key, value in change.items():
        body[key] = {**body[key], **value} if isinstance(value, dict) else value
    resp = client.post("/verify/kernel/tasks", json=body)
    assert resp.status_code == 422 and needle in resp.text, resp.text
    assert "broken_task" not in client.get("/verify/tasks").json()["kernel"]


def test_tasks_load_from_the_folder_a_setting_names(
    client: TestClient, tmp_path, monkeypatch
) -> None:
    import shutil

    from services.verifier.web.spec import TASKS_DIR as WEB_TASKS
    from services.verifier.web.spec import load_web_task

    folder = tmp_path / "mine"
    shutil.copytree(TASKS_DIR / "softmax", folder / "kernel" / "own_softmax")
    text = (folder / "kernel" / "own_softmax" / "task.yaml").read_text()
    (folder / "kernel" / "own_softmax" / "task.yaml").write_text(
        text.replace("name: softmax", "name: own_softmax")
    )
    shutil.copytree(WEB_TASKS / "counter_todo", folder / "web" / "own_todo")
    text = (folder / "web" / "own_todo" / "task.yaml").read_text()
    (folder / "web" / "own_todo" / "task.yaml").write_text(
        text.replace("name: counter_todo", "name: own_todo")
    )
    monkeypatch.setenv("K3STACK_VERIFIER__TASKS_DIR", str(folder))
    get_settings.cache_clear()
    tasks = client.get("/verify/tasks").json()
    assert "own_softmax" in tasks["kernel"] and "softmax" in tasks["kernel"]
    assert "own_todo" in tasks["web"]
    assert load_web_task("own_todo").reference_dir == folder / "web" / "own_todo" / "reference"
    body = {"task": "own_softmax", "files": {"c.py": "def other(x):\n    return x\n"}}
    assert client.post("/verify/kernel", json=body).status_code == 422  # known task, bad candidate


def test_task_list(client: TestClient) -> None:
    tasks = client.get("/verify/tasks").json()
    assert "kda_step" in tasks["kernel"] and "heldout_factor" in tasks["submission"]


def test_kernel_and_web_jobs_get_workers_of_their_own(monkeypatch) -> None:
    from shared.queue import worker_groups

    groups = {name: (queues, conc) for name, queues, conc in worker_groups("verifier")}
    assert groups["verifier-kernel-worker"] == (["verifier.kernel"], 1)
    assert groups["verifier-web-worker"] == (["verifier.web"], 2)  # two web jobs at once
    assert "verifier.judge" in groups["verifier-worker"][0]
    assert {"verifier.kernel", "verifier.web"}.isdisjoint(groups["verifier-worker"][0])
    monkeypatch.setenv("K3STACK_VERIFIER__WEB_WORKERS", "5")
    get_settings.cache_clear()
    web = {name: conc for name, _, conc in worker_groups("verifier")}["verifier-web-worker"]
    assert web == 5
    monkeypatch.setenv("K3STACK_VERIFIER__KERNEL_WORKERS", "0")
    monkeypatch.setenv("K3STACK_VERIFIER__WEB_WORKERS", "0")
    get_settings.cache_clear()
    try:
        (only,) = worker_groups("verifier")
    finally:
        get_settings.cache_clear()
    assert "verifier.kernel" in only[1] and "verifier.web" in only[1]
