"""Worlds: creation, token isolation, snapshot / restore / fork / reset equality, deletion,
state export, the clock, and deterministic replay."""

from __future__ import annotations

import pytest

from tests.tools.conftest import ToolsWorld, create_world, raw_mail


def _send(w: ToolsWorld, subject: str) -> dict:
    return w.g("POST", "messages/send", json={"raw": raw_mail(subject=subject)})


def test_create_returns_id_token_and_clock(tools_client) -> None:
    resp = tools_client.post("/worlds", json={"scenario": "empty", "seed": 7})
    assert resp.status_code == 201
    body = resp.json()
    assert body["token"].startswith("wt_") and body["seed"] == 7
    got = tools_client.get(f"/worlds/{body['id']}").json()
    assert got["token"] is None  # shown once only
    assert tools_client.get(f"/worlds/{body['id']}/clock").json()["now"] == body["clock"]


def test_unknown_scenario_and_bad_seed_are_4xx(tools_client) -> None:
    resp = tools_client.post("/worlds", json={"scenario": "nope", "seed": 0})
    assert resp.status_code == 404 and "hr_onboarding" in resp.json()["message"]
    assert tools_client.post("/worlds", json={"seed": -1}).status_code == 400


def test_world_token_isolation(tools_client) -> None:
    a, b = create_world(tools_client), create_world(tools_client)
    _send(a, "only in A")
    # A's token on B's world: refused, in Gmail's error shape.
    resp = tools_client.get(f"/worlds/{b.id}/gmail/v1/users/me/messages", headers=a.auth)
    assert resp.status_code == 403
    assert resp.json()["error"]["status"] == "PERMISSION_DENIED"
    # No token / garbage token.
    assert tools_client.get(f"/worlds/{a.id}/gmail/v1/users/me/messages").status_code == 401
    bad = {"Authorization": "Bearer wt_nope"}
    assert (
        tools_client.get(f"/worlds/{a.id}/gmail/v1/users/me/profile", headers=bad).status_code
        == 403
    )
    # B sees nothing of A.
    assert b.g("GET", "messages").get("messages") is None
    assert len(a.g("GET", "messages")["messages"]) == 1
    # The token-only upload route finds the right world by token.
    resp = tools_client.post(
        "/upload/gmail/v1/users/me/messages/send?uploadType=media",
        content=b"To: x@y.test\r\nSubject: via upload\r\n\r\nbody\r\n",
        headers=b.auth | {"Content-Type": "message/rfc822"},
    )
    assert resp.status_code == 200, resp.text
    assert b.g("GET", "messages", params={"q": "subject:upload"})["resultSizeEstimate"] == 1
    assert a.g("GET", "messages", params={"q": "subject:upload"})["resultSizeEstimate"] == 0


def test_snapshot_restore_equality(world: ToolsWorld) -> None:
    _send(world, "first")
    before = world.state()
    snap = world.client.post(f"/worlds/{world.id}/snapshots", json={"label": "x"}).json()
    assert snap["state_hash"] == before["full_hash"]
    _send(world, "second")
    world.advance(by="2h")
    assert world.state()["full_hash"] != before["full_hash"]
    resp = world.client.post(f"/worlds/{world.id}/restore", json={"snapshot_id": snap["id"]})
    assert resp.status_code == 200
    after = world.state()
    assert after["full_hash"] == before["full_hash"]
    assert after["state_hash"] == before["state_hash"]
    assert after["tables"] == before["tables"]
    assert after["clock"] == before["clock"]
    # Ids keep being deterministic after a restore: the next send gets the same id as before.
    again = _send(world, "second")
    world.client.post(f"/worlds/{world.id}/restore", json={"snapshot_id": snap["id"]})
    assert _send(world, "second")["id"] == again["id"]
    listed = world.client.get(f"/worlds/{world.id}/snapshots").json()
    assert any(s["id"] == snap["id"] for s in listed)
    missing = world.client.post(f"/worlds/{world.id}/restore", json={"snapshot_id": "snap_x"})
    assert missing.status_code == 404


def test_fork_is_identical_then_independent(world: ToolsWorld) -> None:
    _send(world, "before fork")
    resp = world.client.post(f"/worlds/{world.id}/fork")
    assert resp.status_code == 201
    child = ToolsWorld(world.client, resp.json()["id"], resp.json()["token"])
    assert child.token != world.token and resp.json()["parent_id"] == world.id
    parent_state, child_state = world.state(), child.state()
    assert parent_state["full_hash"] == child_state["full_hash"]
    assert parent_state["tables"] == child_state["tables"]
    # Same next id in both (same seed, same counter), then they diverge independently.
    assert _send(child, "x")["id"] == _send(world, "x")["id"]
    _send(child, "only in child")
    assert child.state()["full_hash"] != world.state()["full_hash"]
    assert world.g("GET", "messages", params={"q": "child"})["resultSizeEstimate"] == 0
    # Each token opens only its own world.
    assert (
        world.client.get(
            f"/worlds/{child.id}/gmail/v1/users/me/profile", headers=world.auth
        ).status_code
        == 403
    )


def test_reset_goes_back_to_creation(tools_client) -> None:
    w = create_world(tools_client, "hr_onboarding", 1)
    initial = w.state()
    w.advance(by="1d")
    _send(w, "noise")
    assert w.state()["full_hash"] != initial["full_hash"]
    assert tools_client.post(f"/worlds/{w.id}/reset").status_code == 200
    assert w.state()["full_hash"] == initial["full_hash"]
    assert w.g("GET", "profile")["emailAddress"]  # the token still works


def test_delete_world(tools_client) -> None:
    w = create_world(tools_client)
    _send(w, "bye")
    assert tools_client.delete(f"/worlds/{w.id}").status_code == 204
    assert tools_client.get(f"/worlds/{w.id}").status_code == 404
    assert w.gmail("GET", "messages").status_code == 404
    assert tools_client.delete(f"/worlds/{w.id}").status_code == 404


def test_state_export_shape(world: ToolsWorld) -> None:
    _send(world, "exported")
    st = world.state()
    assert len(st["state_hash"]) == 64 and len(st["full_hash"]) == 64
    assert st["apps"]["gmail"]["messages"][0]["subject"] == "exported"
    assert "gmail_messages" in st["tables"] and "tools_row_marks" not in st["tables"]
    slim = world.client.get(f"/worlds/{world.id}/state", params={"tables": False}).json()
    assert "tables" not in slim and slim["full_hash"] == st["full_hash"]


def test_clock_get_and_advance(world: ToolsWorld) -> None:
    now = world.client.get(f"/worlds/{world.id}/clock").json()["now"]
    assert now.startswith("2025-01-06T08:00")
    assert world.advance(by="90m")["now"].startswith("2025-01-06T09:30")
    assert world.advance(by=3600)["now"].startswith("2025-01-06T10:30")
    assert world.advance(by="PT1H30M")["now"].startswith("2025-01-06T12:00")
    assert world.advance(to="2025-01-08T09:00:00Z")["now"].startswith("2025-01-08T09:00")
    # New mail is stamped with the simulated clock.
    sent = _send(world, "timed")
    got = world.g("GET", f"messages/{sent['id']}", params={"format": "minimal"})
    assert got["internalDate"] == str(1736326800 * 1000)


@pytest.mark.parametrize(
    "body",
    [
        {"to": "2020-01-01T00:00:00Z"},
        {"by": "-1h"},
        {"by": "soon"},
        {},
        {"to": "2025-01-07T00:00:00Z", "by": "1h"},
        {"by": 10**12},
    ],
)
def test_clock_advance_rejects_bad_input(world: ToolsWorld, body: dict) -> None:
    resp = world.client.post(f"/worlds/{world.id}/clock/advance", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error_code"] == "invalid_request"


def _replay(client, actions: bool) -> dict:
    w = create_world(client, "hr_onboarding", 3)
    w.advance(to="2030-01-01T00:00:00Z") if False else None
    inst_start = w.client.get(f"/worlds/{w.id}/clock").json()["now"]
    assert inst_start
    if actions:
        w.advance(by="3h")
        msgs = w.g("GET", "messages", params={"q": "is:unread"})["messages"]
        w.g("POST", f"messages/{msgs[0]['id']}/modify", json={"removeLabelIds": ["UNREAD"]})
        _send(w, "replayed action")
    w.advance(by="2d")
    return w.state()


def test_deterministic_replay(tools_client) -> None:
    """Same scenario + seed + actions -> identical state hash (and different actions differ)."""
    one, two = _replay(tools_client, True), _replay(tools_client, True)
    assert one["full_hash"] == two["full_hash"]
    assert one["state_hash"] == two["state_hash"]
    assert _replay(tools_client, False)["state_hash"] != one["state_hash"]


ATTACHMENTS = [
    {"filename": "contract.pdf", "mime_type": "application/pdf", "content": b"%PDF-1.4 terms"},
    {"filename": "notes.txt", "mime_type": "text/plain", "content": "sign by Friday"},
]


def _world_with_attachments(client, seed: int) -> dict:
    """A world whose mailbox holds a delivered mail and a sent one, both with attachments."""
    from services.tools.context import open_world
    from services.tools.events.registry import get_effect

    w = create_world(client, "empty", seed)
    with client.app.state.db.session() as s, open_world(s, w.id, actor="setup") as ctx:
        get_effect("gmail.setup_mailbox")(ctx, {"email": "me@acme.test", "name": "Me"}, None)
        mail = {"from": "ana@acme.test", "subject": "Contract", "body": "see attached"}
        get_effect("gmail.deliver")(ctx, {**mail, "attachments": ATTACHMENTS}, None)
    w.api.gmail_send(["ana@acme.test"], "Signed", "attached", attachments=ATTACHMENTS)
    return w.state()


def test_same_seed_same_hash_with_attachments(tools_client) -> None:
    """Multipart mail carries a MIME boundary; it comes from the world's ids, not chance, so
    two worlds built the same way from the same seed hash the same."""
    one = _world_with_attachments(tools_client, 11)
    two = _world_with_attachments(tools_client, 11)
    raws = [m for m in one["apps"]["gmail"]["messages"] if m.get("attachments")]
    assert len(raws) == 2, one["apps"]["gmail"]["messages"]
    assert one["state_hash"] == two["state_hash"]
    assert one["full_hash"] == two["full_hash"]
    assert _world_with_attachments(tools_client, 12)["state_hash"] != one["state_hash"]


def test_management_needs_api_key_when_auth_is_on(tmp_path, monkeypatch) -> None:
    from fastapi.testclient import TestClient

    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "true")
    monkeypatch.setenv("K3STACK_TOOLS__API_KEY", "svc-key")
    get_settings.cache_clear()
    try:
        from services.tools.app import create_app

        with TestClient(create_app()) as c:
            assert c.post("/worlds", json={}).status_code == 401
            made = c.post("/worlds", json={}, headers={"X-API-Key": "svc-key"}).json()
            h = {"Authorization": f"Bearer {made['token']}"}
            # App routes take the world token, not the API key.
            assert (
                c.get(f"/worlds/{made['id']}/gmail/v1/users/me/profile", headers=h).status_code
                == 200
            )
            assert c.get(f"/worlds/{made['id']}/state", headers=h).status_code == 401
    finally:
        get_settings.cache_clear()


def test_large_snapshots_live_in_the_object_store(tools_client, monkeypatch) -> None:
    """Above the inline limit a snapshot goes to the object store, content-addressed: two
    same-seed worlds' initial states are one object; restore reads it back exactly."""
    from services.tools.models import SnapshotRow, WorldRow
    from services.tools.worlds import service

    monkeypatch.setattr(service, "SNAPSHOT_INLINE_MAX", 0)
    a = create_world(tools_client, "hr_leave", 11)
    b = create_world(tools_client, "hr_leave", 11)
    db = tools_client.app.state.db
    with db.session() as s:
        rows = [s.get(SnapshotRow, s.get(WorldRow, w.id).initial_snapshot_id) for w in (a, b)]
        assert all(r.data is None and r.object_key for r in rows)
        assert rows[0].object_key == rows[1].object_key
    before = a.state()
    snap = tools_client.post(f"/worlds/{a.id}/snapshots", json={}).json()
    a.advance(by="1d")
    assert (
        tools_client.post(f"/worlds/{a.id}/restore", json={"snapshot_id": snap["id"]}).status_code
        == 200
    )
    assert a.state()["full_hash"] == before["full_hash"]
    assert tools_client.post(f"/worlds/{b.id}/reset").status_code == 200


def test_the_session_app_leaves_the_environment_alone(tools_client) -> None:
    """The session's app took its settings when it was built; the variables it was built
    with are not left set for the test directories that run after this one."""
    import os

    from tests.tools.conftest import APP_ENV, ENV_BEFORE

    assert tools_client.app.state.settings.auth_enabled is False
    assert {k: os.environ.get(k) for k in APP_ENV} == ENV_BEFORE


def test_health_does_no_migration_work(tools_client) -> None:
    """``/health`` runs one cheap query; it never opens Alembic's migration context."""
    from sqlalchemy import event

    seen: list[str] = []
    engine = tools_client.app.state.db.engine

    def spy(conn, cursor, statement, *rest) -> None:  # type: ignore[no-untyped-def]
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", spy)
    try:
        resp = tools_client.get("/health")
    finally:
        event.remove(engine, "before_cursor_execute", spy)
    assert resp.status_code == 200 and resp.json()["status"] == "ok", resp.text
    assert seen and not any("alembic" in s.lower() for s in seen), seen
