"""Answers out of reach: in embedded mode too (auth off), every management route wants the
service's admin key, generated once into the data dir; a world's agent token opens only that
world's apps and MCP endpoint."""

from __future__ import annotations

import stat

import pytest

from shared.auth import service_key
from tests.tools.conftest import create_world

MANAGEMENT = [
    ("GET", "/scenarios/hr_leave/oracle?seed=0"),
    ("GET", "/scenarios/hr_leave?seed=0"),
    ("GET", "/scenarios"),
    ("GET", "/worlds/{id}/checks"),
    ("GET", "/worlds/{id}/state"),
    ("GET", "/worlds/{id}/events"),
    ("GET", "/worlds/{id}/clock"),
    ("POST", "/worlds/{id}/clock/advance"),
    ("POST", "/worlds/{id}/snapshots"),
    ("POST", "/worlds/{id}/fork"),
    ("POST", "/worlds"),
]


@pytest.fixture(scope="module")
def hr_world(tools_client):
    return create_world(tools_client, "hr_leave")


@pytest.mark.parametrize(("method", "path"), MANAGEMENT)
def test_an_agent_token_opens_no_management_route(hr_world, agent_client, method, path):
    w = hr_world
    url = path.format(id=w.id)
    for headers, want in (
        ({}, 401),
        (w.auth, 403),  # the world's own token, as Bearer
        ({"X-World-Token": w.token, "X-API-Key": w.token}, 403),
        ({"X-API-Key": "guess"}, 403),
    ):
        resp = agent_client.request(method, url, headers=headers, json={"by": "1h"})
        assert resp.status_code == want, (method, url, headers, resp.text)
    # …while that token still works its own world's apps and MCP endpoint
    assert agent_client.get(f"/worlds/{w.id}/gmail/v1/users/me/profile",
                            headers=w.auth).status_code == 200  # fmt: skip
    listed = agent_client.post(f"/worlds/{w.id}/mcp", headers=w.auth,
                               json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})  # fmt: skip
    assert listed.status_code == 200 and listed.json()["result"]["tools"]


def test_embedded_mode_generates_the_key_into_the_data_dir(tools_client):
    settings = tools_client.app.state.settings
    assert not settings.auth_enabled and not settings.tools.api_key
    path = settings.data_dir / "keys" / "tools.key"
    key = path.read_text().strip()
    assert len(key) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert service_key(settings, "tools") == key  # what the platform's clients read
    assert tools_client.get("/scenarios").status_code == 200  # the fixture sends it


def test_the_platform_client_reads_the_embedded_key(tmp_path, monkeypatch):
    from shared.clients import ToolsClient
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    client = ToolsClient.from_settings()
    assert client.api_key == (tmp_path / "keys" / "tools.key").read_text().strip()
    monkeypatch.setenv("K3STACK_TOOLS__API_KEY", "configured-key-0123456789")
    get_settings.cache_clear()
    assert ToolsClient.from_settings().api_key == "configured-key-0123456789"


APP_READS = [
    ("gmail", "GET", "gmail/v1/users/me/profile"),
    ("slack", "POST", "slack/api/auth.test"),
    ("calendar", "GET", "calendar/v3/users/me/calendarList"),
    ("notion", "GET", "notion/v1/users/me"),
    ("canvas", "GET", "canvas/api/v1/courses"),
    ("mcp", "POST", "mcp"),
]


@pytest.mark.parametrize(("app", "method", "path"), APP_READS, ids=[a[0] for a in APP_READS])
def test_a_world_token_in_the_query_string_is_refused_not_read(
    hr_world, agent_client, app, method, path
):
    """A token in the URL lands in access logs: refused with a 400 that says to use the
    header, even beside a valid header; the header alone still opens the world."""
    w = hr_world
    url = f"/worlds/{w.id}/{path}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"} if app == "mcp" else None
    notion = {"Notion-Version": "2022-06-28"} if app == "notion" else {}
    for param in ("token", "access_token"):
        for headers in ({}, w.auth):
            resp = agent_client.request(
                method, url, params={param: w.token}, headers={**headers, **notion}, json=body
            )
            assert resp.status_code == 400, (app, param, resp.status_code, resp.text)
            assert "Authorization: Bearer" in resp.text and w.token not in resp.text
    resp = agent_client.request(method, url, headers={**w.auth, **notion}, json=body)
    assert resp.status_code == 200, (app, resp.text[:300])
