"""The rollout API over HTTP: a batch runs through POST /rollouts (samples run by the enqueue
hook, in-process, as a worker would), GET shows phases and version spans, the export streams
one line per sample; bad input is a 4xx naming the problem."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers.asgi import serve
from tests.orchestrator.rollout_endpoint import endpoint


@pytest.fixture
def api(tmp_path, monkeypatch) -> Iterator[tuple[TestClient, list[threading.Thread]]]:
    yield from _api(tmp_path, monkeypatch, "http://127.0.0.1:9")


@pytest.fixture
def api_tools(tmp_path, monkeypatch, tools_url) -> Iterator[tuple[TestClient, list]]:
    """The API with the real tools service (scenarios are checked there at submit)."""
    yield from _api(tmp_path, monkeypatch, tools_url)


def _api(tmp_path, monkeypatch, tools_url: str) -> Iterator[tuple[TestClient, list]]:
    from services.orchestrator.app import create_app
    from services.orchestrator.rollouts.tasks import run_inline
    from shared.settings import get_settings

    for key, value in {
        "K3STACK_TOOLS__URL": tools_url, "K3STACK_MODEL__URL": "http://127.0.0.1:9",
        "K3STACK_SANDBOX__URL": "http://127.0.0.1:9",
        "K3STACK_DATABASE_URL": f"sqlite:///{tmp_path}/orch.db",
        "K3STACK_ORCHESTRATOR__REAPER_INTERVAL_S": "0",
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    holder: dict[str, Any] = {}
    threads: list[threading.Thread] = []

    def enqueue(sample_id: str) -> None:
        app = holder["app"]
        t = threading.Thread(target=run_inline, args=(app.state.db, app.state.services, sample_id))
        threads.append(t)
        t.start()

    app = create_app(enqueue=lambda _i: None, rollout_enqueue=enqueue)
    holder["app"] = app
    with TestClient(app) as client:
        yield client, threads
    get_settings.cache_clear()


def test_batch_over_http(api) -> None:
    client, threads = api
    with serve(endpoint()) as url:
        body = {
            "tasks": [{"instruction": "turns=1"}, {"instruction": "turns=2"}],
            "samples_per_task": 2, "harness": "codex",
            "policy": {"base_url": f"{url}/v1", "version": "v1", "temperature": 0},
        }  # fmt: skip
        resp = client.post("/rollouts", json=body)
        assert resp.status_code == 202, resp.text
        rid = resp.json()["id"]
        for t in list(threads):
            t.join(timeout=120)
    view = client.get(f"/rollouts/{rid}").json()
    assert view["counts"] == {"finished": 4}
    assert all(s["versions"][0]["version"] == "v1" for s in view["samples"])
    lines = client.get(f"/rollouts/{rid}/export", params={"format": "atif"}).text.splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["schema_version"] == "ATIF-v1.4"
    bad = client.post(f"/rollouts/{rid}/iterate", json={"policy": {}})
    assert bad.status_code == 400 and "version" in bad.text


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"lam": 0}, "lam"),
        ({"samples_per_task": 10**9}, "samples_per_task"),
        ({"tasks": []}, "tasks"),
        ({"effort": "extreme"}, "effort"),
        ({"budgets": {"effort_budgets": {"low": -5}}}, "effort_budgets"),
        ({"harness": "no-such-harness"}, "harness"),
        ({"policy": {"version": "v1", "base_url": "not a url"}}, "policy.base_url"),
        ({"policy": {"version": "v1", "base_url": "ftp://host/v1"}}, "policy.base_url"),
        ({"harness": "claude-code-cli"}, "installed agent"),
        ({"harness": "codex-cli"}, "installed agent"),
    ],
)
def test_bad_input_is_a_4xx_naming_it(api, patch, needle) -> None:
    client, _ = api
    body = {"tasks": [{"instruction": "x"}], "policy": {"version": "v1"}, **patch}
    resp = client.post("/rollouts", json=body)
    assert 400 <= resp.status_code < 500 and needle in resp.text, resp.text


def test_unknown_rollout_is_404(api) -> None:
    client, _ = api
    assert client.get("/rollouts/ro_nope").status_code == 404
    assert client.get("/rollouts/ro_nope/export").status_code == 404
    assert client.get("/rollouts/ro_nope/export", params={"format": "csv"}).status_code == 400
    body = {"policy": {"version": "v2"}}
    assert client.post("/rollouts/ro_nope/iterate", json=body).status_code == 404


def test_a_sample_whose_policy_fails_is_failed_not_succeeded(api) -> None:
    """A policy endpoint that refuses every call: each sample ends ``policy_error``, phase
    ``failed`` and job ``failed`` with that code (it was ``finished`` / ``succeeded``)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    broken = FastAPI()

    @broken.post("/v1/{path:path}")
    def refuse(path: str) -> JSONResponse:
        return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)

    client, threads = api
    with serve(broken) as url:
        body = {"tasks": [{"instruction": "turns=1"}], "samples_per_task": 2,
                "policy": {"base_url": f"{url}/v1", "version": "v1"}}  # fmt: skip
        resp = client.post("/rollouts", json=body)
        assert resp.status_code == 202, resp.text
        for t in list(threads):
            t.join(timeout=120)
    view = client.get(f"/rollouts/{resp.json()['id']}").json()
    assert view["counts"] == {"failed": 2}, view
    for sample in view["samples"]:
        assert (sample["status"], sample["exit_reason"]) == ("failed", "policy_error"), sample
        assert "503" in (sample["error"] or ""), sample


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('"lam": NaN', "lam"),
        ('"policy": {"version": "v1", "temperature": NaN}', "policy.temperature"),
    ],
)
def test_nan_is_a_400_naming_the_field(api, raw: str, field: str) -> None:
    client, _ = api
    body = '{"tasks": [{"instruction": "x"}], "policy": {"version": "v1"}, ' + raw + "}"
    resp = client.post("/rollouts", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400 and field in resp.text, resp.text


def test_an_unknown_scenario_is_a_400_naming_its_task(api_tools) -> None:
    """Checked against the tools service at submit (it was queued, then every sample failed)."""
    client, threads = api_tools
    tasks = [{"scenario": "empty"}, {"scenario": "no_such_scenario"}]
    resp = client.post("/rollouts", json={"tasks": tasks, "policy": {"version": "v1"}})
    assert resp.status_code == 400 and "tasks[1].scenario" in resp.text, resp.text
    assert not threads  # nothing queued


def test_missing_logprobs_are_null_and_atif_names_the_versions_that_made_the_tokens(api) -> None:
    """An endpoint that returns no logprobs: the export has null for them (it padded 0.0, which
    a trainer reads as probability 1), and ATIF leaves them out; after a bump to v2 the samples
    that ran under v1 alone are labelled v1 (they were labelled with the batch's latest)."""
    from shared.trajectory.atif import validate_atif

    client, threads = api
    with serve(endpoint(logprobs=False)) as url:
        body = {"tasks": [{"instruction": "turns=2"}], "samples_per_task": 2, "harness": "codex",
                "policy": {"base_url": f"{url}/v1", "version": "v1", "temperature": 0}}  # fmt: skip
        resp = client.post("/rollouts", json=body)
        assert resp.status_code == 202, resp.text
        rid = resp.json()["id"]
        for t in list(threads):
            t.join(timeout=120)
    assert client.get(f"/rollouts/{rid}").json()["counts"] == {"finished": 2}
    bump = client.post(f"/rollouts/{rid}/iterate", json={"policy": {"version": "v2"}})
    assert bump.status_code == 200 and bump.json()["policy"]["version"] == "v2", bump.text
    for line in client.get(f"/rollouts/{rid}/export").text.splitlines():
        toks = json.loads(line)["tokens"]
        assert sum(toks["loss_mask"]) > 0 and set(toks["logprobs"]) == {None}, toks["logprobs"]
    for line in client.get(f"/rollouts/{rid}/export", params={"format": "atif"}).text.splitlines():
        doc = json.loads(line)
        validate_atif(doc)
        assert doc["agent"]["version"] == "v1", doc["agent"]
        agent = [s for s in doc["steps"] if s["source"] == "agent"]
        assert agent and not any("logprobs" in s["metrics"] for s in agent)
