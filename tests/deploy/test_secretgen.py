"""shared.secretgen (the chart's pre-install hook) against an HTTP stand-in for the Kubernetes
Secrets API (a real cluster is not available here): values are generated once and never again,
shared values agree across Secrets, explicit values win, and the spec the chart renders works.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from shared import secretgen
from tests.deploy.test_helm import FULLNAME, _render_variant, secretgen_spec

TOKEN = "test-token"


class FakeSecretsAPI(ThreadingHTTPServer):
    """GET/POST/PATCH (merge) of /api/v1/namespaces/<ns>/secrets[/<name>], bearer-checked."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: FakeSecretsAPI

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, str | None] | None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._reply(401, {"kind": "Status", "code": 401})
            return None
        parts = self.path.strip("/").split("/")
        assert parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "secrets", self.path
        self.server.calls.append((self.command, self.path))
        return parts[3], (parts[5] if len(parts) > 5 else None)

    def _body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def do_GET(self) -> None:  # noqa: N802
        route = self._route()
        if route is None:
            return
        obj = self.server.secrets.get(route)  # type: ignore[arg-type]
        self._reply(200, obj) if obj else self._reply(404, {"kind": "Status", "code": 404})

    def do_POST(self) -> None:  # noqa: N802
        route = self._route()
        if route is None:
            return
        body = self._body()
        key = (route[0], body["metadata"]["name"])
        if key in self.server.secrets:
            self._reply(409, {"kind": "Status", "code": 409})
            return
        self.server.secrets[key] = body
        self._reply(201, body)

    def do_PATCH(self) -> None:  # noqa: N802
        route = self._route()
        if route is None:
            return
        assert self.headers["Content-Type"] == "application/merge-patch+json"
        obj = self.server.secrets[route]  # type: ignore[index]
        obj["data"].update(self._body()["data"])
        self._reply(200, obj)


@pytest.fixture
def api() -> Iterator[FakeSecretsAPI]:
    server = FakeSecretsAPI()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def run(api: FakeSecretsAPI, spec: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{api.server_address[1]}"
    args = ["--spec", json.dumps(spec), "--api", url, "--token", TOKEN, "--namespace", "agents"]
    assert secretgen.main(args) == 0


def data(api: FakeSecretsAPI, name: str) -> dict[str, str]:
    obj = api.secrets[("agents", name)]
    return {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}


def test_the_charts_spec_creates_every_secret_once(
    api: FakeSecretsAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = secretgen_spec(_render_variant("default"))
    spec["explicit"] = str(tmp_path / "absent.json")
    run(api, spec)
    first = {name: data(api, name) for name in spec["secrets"]}
    assert set(first) == set(spec["secrets"])
    for name, keys in spec["secrets"].items():
        assert set(first[name]) == set(keys)  # each Secret holds only its component's keys
        for value in first[name].values():
            assert len(value) == 48 and value.isalnum()  # URL-safe: it sits in database URLs
    sandbox_key = first[f"{FULLNAME}-sandbox"]["K3STACK_SANDBOX__API_KEY"]
    assert first[f"{FULLNAME}-orchestrator"]["K3STACK_SANDBOX__API_KEY"] == sandbox_key
    pg = first[f"{FULLNAME}-postgresql"]["POSTGRES_PASSWORD"]
    assert all(first[f"{FULLNAME}-{s}"]["POSTGRES_PASSWORD"] == pg for s in ("tools", "model"))
    labels = api.secrets[("agents", f"{FULLNAME}-tools")]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "k3s"
    out = capsys.readouterr().out
    assert sandbox_key not in out and pg not in out  # names only in the Job log

    # The next install/upgrade run: nothing regenerated, nothing written.
    api.calls.clear()
    run(api, spec)
    assert {name: data(api, name) for name in spec["secrets"]} == first
    assert {method for method, _ in api.calls} == {"GET"}


def test_explicit_values_win_and_new_keys_reuse_existing_values(
    api: FakeSecretsAPI, tmp_path: Path
) -> None:
    spec = {
        "secrets": {
            "a": {"K3STACK_TOOLS__API_KEY": "api-key-tools", "POSTGRES_PASSWORD": "pg"},
            "b": {"POSTGRES_PASSWORD": "pg"},
        },
        "explicit": str(tmp_path / "values.json"),
    }
    run(api, spec)
    pg = data(api, "a")["POSTGRES_PASSWORD"]
    # Upgrade: a new Secret needing the same password, and the tools key now set in the values.
    spec["secrets"]["c"] = {"POSTGRES_PASSWORD": "pg", "K3STACK_TOOLS__API_KEY": "api-key-tools"}
    (tmp_path / "values.json").write_text(json.dumps({"api-key-tools": "set-in-values-0123456"}))
    run(api, spec)
    assert data(api, "c") == {
        "POSTGRES_PASSWORD": pg,
        "K3STACK_TOOLS__API_KEY": "set-in-values-0123456",
    }
    assert data(api, "a") == {
        "K3STACK_TOOLS__API_KEY": "set-in-values-0123456",
        "POSTGRES_PASSWORD": pg,
    }
    assert data(api, "b") == {"POSTGRES_PASSWORD": pg}
