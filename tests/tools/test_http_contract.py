"""The HTTP contract the fuzz test holds the tools service to, one behaviour at a time: an
undeclared method is a 405 naming the path's documented methods, a schema-invalid request a
4xx in the app's own error shape, a declared header or field is enforced."""

from __future__ import annotations

import re

from tests.tools.conftest import create_world

NOTION = {"Notion-Version": "2022-06-28"}


def _allow(resp) -> set[str]:  # type: ignore[no-untyped-def]
    return {m.strip() for m in resp.headers["allow"].split(",")}


def test_every_documented_path_answers_405_with_its_documented_methods(tools_client) -> None:  # type: ignore[no-untyped-def]
    world = create_world(tools_client)
    doc = tools_client.get("/openapi.json").json()
    paths = doc["paths"]
    assert len(paths) > 100
    wrong: list[str] = []
    for template, item in paths.items():
        path = template.replace("{world_id}", world.id)
        path = re.sub(r"\{[^}]+\}", "x", path)
        documented = {m.upper() for m in item}
        # Parameters become ``x``, which no literal segment is: each probe hits its template.
        for method in ("TRACE", "OPTIONS"):
            resp = tools_client.request(method, path, headers=world.auth)
            if resp.status_code != 405 or _allow(resp) != documented:
                got = resp.headers.get("allow")
                wrong.append(f"{method} {template}: {resp.status_code} Allow={got} != {documented}")
    assert not wrong, "\n".join(wrong[:20])


def test_405_is_in_the_apps_style_and_beats_catch_alls(tools_client) -> None:  # type: ignore[no-untyped-def]
    world = create_world(tools_client, "hr_onboarding", 5)
    base = f"/worlds/{world.id}"
    # Gmail: Google's error body, every method of the label's path (Starlette named only GET).
    resp = tools_client.put(f"{base}/gmail/v1/users/me/labels", headers=world.auth, json={})
    assert resp.status_code == 405 and _allow(resp) == {"GET", "POST"}
    assert resp.json()["error"]["code"] == 405
    # Notion's catch-all (``invalid_request_url``) no longer swallows a real path's method...
    resp = tools_client.post(f"{base}/notion/v1/blocks/abc", headers={**world.auth, **NOTION})
    assert resp.status_code == 405 and _allow(resp) == {"DELETE", "GET", "PATCH"}
    assert resp.json()["object"] == "error"
    # ...and still answers a URL no route has.
    resp = tools_client.get(f"{base}/notion/v1/nothing/here", headers={**world.auth, **NOTION})
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_request_url"
    # A literal template before a templated one: GET on ``messages/send`` is no message read.
    resp = tools_client.get(f"{base}/gmail/v1/users/me/messages/send", headers=world.auth)
    assert resp.status_code == 405 and _allow(resp) == {"POST"}
    # Management routes: the platform's error body.
    resp = tools_client.patch(base, json={})
    assert resp.status_code == 405 and _allow(resp) == {"DELETE", "GET"}
    assert resp.json()["error_code"] == "method_not_allowed"
    # A documented method still reaches its route.
    assert (
        tools_client.get(f"{base}/gmail/v1/users/me/labels", headers=world.auth).status_code == 200
    )


def test_schema_invalid_requests_get_4xx_and_valid_ones_pass(tools_client) -> None:  # type: ignore[no-untyped-def]
    # Strictly typed management body: ``false`` / ``"3"`` / ``3.5`` are no integer seed.
    for seed in (False, "3", -1, 3.5, 1e300):
        resp = tools_client.post("/worlds", json={"scenario": "empty", "seed": seed})
        assert resp.status_code == 400, (seed, resp.text)
        assert resp.json()["error_code"] == "invalid_request"
    # ``3.0`` is an integer in JSON Schema (schemathesis sends such as schema-valid data).
    for seed in (3, 3.0):
        resp = tools_client.post("/worlds", json={"scenario": "empty", "seed": seed})
        assert resp.status_code == 201 and resp.json()["seed"] == 3, (seed, resp.text)

    world = create_world(tools_client, "hr_onboarding", 5)
    base, auth = f"/worlds/{world.id}", world.auth
    # Gmail: a label's name and a message's raw are required (Google's error body).
    resp = tools_client.post(f"{base}/gmail/v1/users/me/labels", headers=auth, json={})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == 400
    resp = tools_client.post(f"{base}/gmail/v1/users/me/messages/send", headers=auth, json={})
    assert resp.status_code == 400 and "error" in resp.json()
    resp = tools_client.post(
        f"{base}/gmail/v1/users/me/labels", headers=auth, json={"name": "Fuzz", "type": "user"}
    )
    assert resp.status_code == 200 and resp.json()["name"] == "Fuzz"
    # Notion: the declared version header is required, and enforced with Notion's own code.
    resp = tools_client.get(f"{base}/notion/v1/users/me", headers=auth)
    assert resp.status_code == 400 and resp.json()["code"] == "missing_version"
    resp = tools_client.get(f"{base}/notion/v1/comments", headers={**auth, **NOTION})
    assert resp.status_code == 400 and resp.json()["code"] == "validation_error"
    # Calendar: a required query parameter and body field, a page token it never handed out.
    cal = f"{base}/calendar/v3"
    resp = tools_client.post(f"{cal}/calendars/primary/events/x/move", headers=auth)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == 400
    resp = tools_client.post(f"{cal}/calendars", headers=auth, json={"summary": 5})
    assert resp.status_code == 400
    resp = tools_client.get(f"{cal}/users/me/calendarList?pageToken=zz", headers=auth)
    assert resp.status_code == 400
    resp = tools_client.get(f"{cal}/users/me/calendarList?maxResults=0", headers=auth)
    assert resp.status_code == 400
    assert tools_client.post(f"{cal}/calendars", headers=auth, json={"summary": "Ok"}).is_success
    # MCP: a JSON-RPC version other than 2.0 is refused, a notification accepted (202).
    msg = {"jsonrpc": "1.0", "method": "tools/list", "id": 1}
    assert tools_client.post(f"{base}/mcp", headers=auth, json=msg).status_code == 400
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert tools_client.post(f"{base}/mcp", headers=auth, json=note).status_code == 202


def test_own_rejections_are_documented_as_such(tools_client) -> None:  # type: ignore[no-untyped-def]
    """A route's own 4xx (``rejects``) is in the document with the app's error body; routes
    without one document none (their 4xx are only the shared ``4XX``)."""
    paths = tools_client.get("/openapi.json").json()["paths"]
    send = paths["/worlds/{world_id}/gmail/v1/users/{userId}/messages/send"]["post"]
    assert "Recipient address required" in send["responses"]["400"]["description"]
    schema = send["responses"]["400"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/GmailErrorBody"}
    get = paths["/worlds/{world_id}/gmail/v1/users/{userId}/messages/{id}"]["get"]
    assert [c for c in get["responses"] if c.startswith("4")] == ["4XX"]
    header = [
        p
        for p in paths["/worlds/{world_id}/notion/v1/users/me"]["get"]["parameters"]
        if p["in"] == "header"
    ]
    assert header and header[0]["name"] == "Notion-Version" and header[0]["required"] is True
