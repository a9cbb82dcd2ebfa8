"""Fixtures for the tools service's world, Gmail, event, scenario and fuzz tests.

One tools app (the real ``create_app``, migrated SQLite in a temp dir) serves the whole test
session; every test makes its own worlds, which are isolated by construction.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.tools.scenarios.api import WorldAPI
from shared.auth import API_KEY_HEADER, service_key

# What the session's tools app needs from the environment, and only while it is built: the
# app keeps its settings (``app.state.settings``) from then on, so the variables are put back
# before any test runs and never reach the test directories that run after this one.
# (K3STACK_DATA_DIR is the suite's own, set afresh for every test by tests/conftest.py.)
APP_ENV = ("K3STACK_DATABASE_URL", "K3STACK_AUTH_ENABLED")
ENV_BEFORE = {k: os.environ.get(k) for k in APP_ENV}


@pytest.fixture(scope="session")
def tools_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    from shared.settings import get_settings

    data = tmp_path_factory.mktemp("tools")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3STACK_DATA_DIR", str(data))
        mp.delenv("K3STACK_DATABASE_URL", raising=False)
        mp.setenv("K3STACK_AUTH_ENABLED", "false")
        get_settings.cache_clear()
        from services.tools.app import create_app

        client = TestClient(create_app())
        client.__enter__()  # the lifespan: migrations, app.state.db, the admin key
    get_settings.cache_clear()
    keyed(client)  # the platform's side: management routes want the admin key in every mode
    try:
        yield client
    finally:
        client.__exit__(None, None, None)


def keyed(client: TestClient) -> TestClient:
    """``client`` sending the service's admin key (read as the platform's clients do)."""
    client.headers[API_KEY_HEADER] = service_key(client.app.state.settings, "tools")
    return client


@pytest.fixture
def agent_client(tools_client: TestClient) -> TestClient:
    """The same service as an agent reaches it: no admin key, only what it sends."""
    return TestClient(tools_client.app)


@dataclass
class ToolsWorld:
    client: TestClient
    id: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def api(self) -> WorldAPI:
        return WorldAPI(self.client, self.id, self.token)

    def gmail(self, method: str, path: str, **kw: Any) -> Any:
        """Call ``/gmail/v1/users/me/<path>``; returns the response."""
        return self.client.request(
            method, f"/worlds/{self.id}/gmail/v1/users/me/{path}", headers=self.auth, **kw
        )

    def g(self, method: str, path: str, **kw: Any) -> Any:
        """As :meth:`gmail`, asserting success and returning the JSON body."""
        resp = self.gmail(method, path, **kw)
        assert resp.status_code < 300, resp.text
        return resp.json() if resp.content else None

    def state(self) -> dict[str, Any]:
        return self.client.get(f"/worlds/{self.id}/state").json()

    def advance(self, **body: Any) -> dict[str, Any]:
        resp = self.client.post(f"/worlds/{self.id}/clock/advance", json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()


def create_world(client: TestClient, scenario: str = "empty", seed: int = 0) -> ToolsWorld:
    resp = client.post("/worlds", json={"scenario": scenario, "seed": seed})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    return ToolsWorld(client, body["id"], body["token"])


@pytest.fixture
def world(tools_client: TestClient) -> ToolsWorld:
    return create_world(tools_client)


def raw_mail(
    to: str = "bob@example.test",
    subject: str = "hello",
    body: str = "hi there",
    *,
    sender: str | None = None,
    cc: str | None = None,
    headers: dict[str, str] | None = None,
    attachments: list[tuple[str, bytes, str]] | None = None,
) -> str:
    """A base64url RFC 2822 message as Gmail's ``raw`` field takes it."""
    msg = EmailMessage()
    if sender:
        msg["From"] = sender
    msg["To"] = to
    if cc:
        msg["Cc"] = cc
    msg["Subject"] = subject
    for k, v in (headers or {}).items():
        msg[k] = v
    msg.set_content(body)
    for name, data, mime in attachments or []:
        main, _, sub = mime.partition("/")
        msg.add_attachment(data, maintype=main, subtype=sub, filename=name)
    return base64.urlsafe_b64encode(msg.as_bytes()).decode()
