"""Mock Slack: Web API semantics (threads, paging, search, reactions, pins, files, errors)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from services.tools.apps.slack import actions as slack
from services.tools.apps.slack.routes import router as slack_router
from services.tools.apps.slack.state import export_state
from tests.tools.apps_conftest import CLOCK, make_world, set_clock, tools_app, world_ctx


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with tools_app(tmp_path_factory.mktemp("slack"), [slack_router]) as app:
        yield app


@pytest.fixture
def world(app):
    w = make_world(app)
    with world_ctx(app, w.id) as ctx:
        slack.setup_workspace(ctx, agent_name="ava", agent_email="ava@acme.test")
        bob = slack.create_user(ctx, name="bob", real_name="Bob Stone", email="bob@acme.test")
        carol = slack.create_user(ctx, name="carol", email="carol@acme.test")
        slack.conversations_create(ctx, name="legal", as_user=bob["id"])
        slack.conversations_create(ctx, name="secret", is_private=True, as_user=carol["id"])
    w.bob, w.carol = bob["id"], carol["id"]
    return w


def call(w, method, **params):
    r = w.client.post(f"/worlds/{w.id}/slack/api/{method}", json=params)
    assert r.status_code == 200, r.text
    return r.json()


def channel_id(w, name):
    for ch in call(w, "conversations.list", types="public_channel,private_channel")["channels"]:
        if ch["name"] == name:
            return ch["id"]
    raise AssertionError(name)


def test_auth_test_and_token_isolation(app, world):
    me = call(world, "auth.test")
    assert me["ok"] and me["user"] == "ava"
    other = make_world(app)
    r = other.client.post(f"/worlds/{world.id}/slack/api/auth.test")
    assert r.status_code == 200 and r.json() == {
        "ok": False,
        "error": "invalid_auth",
        "response_metadata": r.json()["response_metadata"],
    }
    r = world.client.post(f"/worlds/{world.id}/slack/api/auth.test", headers={"Authorization": ""})
    assert r.json()["error"] == "not_authed"


def test_post_requires_membership_and_join(world):
    legal = channel_id(world, "legal")
    assert call(world, "chat.postMessage", channel=legal, text="hi")["error"] == "not_in_channel"
    assert call(world, "conversations.join", channel=legal)["channel"]["is_member"]
    posted = call(world, "chat.postMessage", channel=legal, text=f"hi <@{world.bob}>")
    assert posted["ok"] and posted["message"]["text"].startswith("hi")
    # private channels the agent is not in do not exist for it
    assert "secret" not in [
        c["name"] for c in call(world, "conversations.list", types="private_channel")["channels"]
    ]
    assert call(world, "conversations.info", channel="secret")["error"] == "channel_not_found"


def test_ts_monotonic_threads_and_replies(app, world):
    general = channel_id(world, "general")
    a = call(world, "chat.postMessage", channel=general, text="root")["ts"]
    b = call(world, "chat.postMessage", channel=general, text="second")["ts"]
    assert b > a and a.startswith(str(int(CLOCK.timestamp())))
    r1 = call(world, "chat.postMessage", channel=general, text="reply 1", thread_ts=a)
    with world_ctx(app, world.id) as ctx:
        slack.post_message(ctx, channel=general, text="reply 2", thread_ts=a, as_user=world.bob)
    hist = call(world, "conversations.history", channel=general)
    assert [m["text"] for m in hist["messages"]] == ["second", "root"]
    root = hist["messages"][1]
    assert root["reply_count"] == 2 and root["reply_users"] == sorted(
        [world.bob, r1["message"]["user"]]
    )
    replies = call(world, "conversations.replies", channel=general, ts=a)
    assert [m["text"] for m in replies["messages"]] == ["root", "reply 1", "reply 2"]
    # replying to a reply lands in the same thread
    r3 = call(world, "chat.postMessage", channel=general, text="reply 3", thread_ts=r1["ts"])
    assert r3["message"]["thread_ts"] == a
    assert (
        call(world, "chat.postMessage", channel=general, text="x", thread_ts="1.000001")["error"]
        == "thread_not_found"
    )


def test_history_cursor_paging_and_ranges(world):
    general = channel_id(world, "general")
    ts = [call(world, "chat.postMessage", channel=general, text=f"m{i}")["ts"] for i in range(7)]
    seen, cursor = [], None
    while True:
        page = call(world, "conversations.history", channel=general, limit=3, cursor=cursor)
        seen += [m["text"] for m in page["messages"]]
        cursor = page["response_metadata"]["next_cursor"]
        assert page["has_more"] == bool(cursor)
        if not cursor:
            break
    assert seen == [f"m{i}" for i in reversed(range(7))]
    window = call(world, "conversations.history", channel=general, oldest=ts[1], latest=ts[4])
    assert [m["text"] for m in window["messages"]] == ["m3", "m2"]
    window = call(
        world, "conversations.history", channel=general, oldest=ts[1], latest=ts[4], inclusive=True
    )
    assert [m["text"] for m in window["messages"]] == ["m4", "m3", "m2", "m1"]
    assert (
        call(world, "conversations.history", channel=general, cursor="garbage")["error"]
        == "invalid_cursor"
    )


def test_update_delete_permissions_and_tombstone(app, world):
    general = channel_id(world, "general")
    mine = call(world, "chat.postMessage", channel=general, text="draft")["ts"]
    upd = call(world, "chat.update", channel=general, ts=mine, text="final")
    assert upd["text"] == "final" and "edited" in upd["message"]
    with world_ctx(app, world.id) as ctx:
        theirs = slack.post_message(ctx, channel=general, text="bob's", as_user=world.bob)["ts"]
    assert (
        call(world, "chat.update", channel=general, ts=theirs, text="x")["error"]
        == "cant_update_message"
    )
    assert call(world, "chat.delete", channel=general, ts=theirs)["error"] == "cant_delete_message"
    call(world, "chat.postMessage", channel=general, text="reply", thread_ts=mine)
    assert call(world, "chat.delete", channel=general, ts=mine)["ok"]
    root = call(world, "conversations.history", channel=general)["messages"][-1]
    assert root["subtype"] == "tombstone"
    assert (
        call(world, "chat.delete", channel=general, ts="1700000000.000001")["error"]
        == "message_not_found"
    )


def test_reactions_and_pins(world):
    general = channel_id(world, "general")
    ts = call(world, "chat.postMessage", channel=general, text="ship it")["ts"]
    assert call(world, "reactions.add", channel=general, timestamp=ts, name=":tada:")["ok"]
    assert (
        call(world, "reactions.add", channel=general, timestamp=ts, name="tada")["error"]
        == "already_reacted"
    )
    got = call(world, "reactions.get", channel=general, timestamp=ts)
    assert (
        got["message"]["reactions"][0]["name"] == "tada"
        and got["message"]["reactions"][0]["count"] == 1
    )
    assert call(world, "reactions.remove", channel=general, timestamp=ts, name="tada")["ok"]
    assert (
        call(world, "reactions.remove", channel=general, timestamp=ts, name="tada")["error"]
        == "no_reaction"
    )
    assert call(world, "pins.add", channel=general, timestamp=ts)["ok"]
    assert call(world, "pins.add", channel=general, timestamp=ts)["error"] == "already_pinned"
    pins = call(world, "pins.list", channel=general)["items"]
    assert [p["message"]["ts"] for p in pins] == [ts]
    assert call(world, "pins.remove", channel=general, timestamp=ts)["ok"]
    assert call(world, "pins.list", channel=general)["items"] == []


def test_users_lookup_and_paging(world):
    assert call(world, "users.lookupByEmail", email="BOB@acme.test")["user"]["id"] == world.bob
    assert (
        call(world, "users.lookupByEmail", email="nobody@acme.test")["error"] == "users_not_found"
    )
    assert call(world, "users.info", user="U000")["error"] == "user_not_found"
    page = call(world, "users.list", limit=2)
    assert len(page["members"]) == 2 and page["response_metadata"]["next_cursor"]
    rest = call(world, "users.list", limit=2, cursor=page["response_metadata"]["next_cursor"])
    assert len(rest["members"]) == 1 and rest["response_metadata"]["next_cursor"] == ""


def test_create_invite_archive_open(world):
    assert call(world, "conversations.create", name="Bad Name")["error"] == "invalid_name_specials"
    assert call(world, "conversations.create", name="legal")["error"] == "name_taken"
    ch = call(world, "conversations.create", name="deal-room", is_private=True)["channel"]
    assert ch["is_private"] and ch["is_member"]
    assert call(
        world, "conversations.invite", channel=ch["id"], users=f"{world.bob},{world.carol}"
    )["ok"]
    assert (
        call(world, "conversations.invite", channel=ch["id"], users=world.bob)["error"]
        == "already_in_channel"
    )
    members = call(world, "conversations.members", channel=ch["id"])["members"]
    assert set(members) >= {world.bob, world.carol}
    assert call(world, "conversations.archive", channel=ch["id"])["ok"]
    assert call(world, "chat.postMessage", channel=ch["id"], text="x")["error"] == "is_archived"
    assert (
        call(world, "conversations.archive", channel="general")["error"] == "cant_archive_general"
    )
    im = call(world, "conversations.open", users=world.bob)["channel"]["id"]
    assert im.startswith("D")
    assert call(world, "conversations.open", users=world.bob)["already_open"]
    # posting to a user id goes to the IM
    assert call(world, "chat.postMessage", channel=world.bob, text="psst")["channel"] == im


def test_search_modifiers(app, world):
    general = channel_id(world, "general")
    call(world, "conversations.join", channel="legal")
    call(world, "chat.postMessage", channel=general, text="The NDA draft is ready")
    with world_ctx(app, world.id) as ctx:
        slack.post_message(ctx, channel="legal", text="NDA needs a signature", as_user=world.bob)
        slack.post_message(ctx, channel="secret", text="NDA secret", as_user=world.carol)
    set_clock(app, world.id, CLOCK + timedelta(days=2))
    call(world, "chat.postMessage", channel=general, text="lunch? nda later")

    def texts(q, **kw):
        res = call(world, "search.messages", query=q, **kw)["messages"]
        return sorted(m["text"] for m in res["matches"])

    assert texts("nda") == ["NDA needs a signature", "The NDA draft is ready", "lunch? nda later"]
    assert texts("nda in:#legal") == ["NDA needs a signature"]
    assert texts("nda from:@bob") == ["NDA needs a signature"]
    assert texts(f"nda from:<@{world.bob}>") == ["NDA needs a signature"]
    assert texts('"draft is"') == ["The NDA draft is ready"]
    assert texts("nda -lunch") == ["NDA needs a signature", "The NDA draft is ready"]
    assert texts("nda after:2026-03-03") == ["lunch? nda later"]
    assert texts("nda before:2026-03-03") == ["NDA needs a signature", "The NDA draft is ready"]
    assert texts("nda on:2026-03-02 from:me") == ["The NDA draft is ready"]
    res = call(world, "search.messages", query="nda", count=2, sort="timestamp")["messages"]
    assert res["paging"] == {"count": 2, "total": 3, "page": 1, "pages": 2}
    assert res["matches"][0]["text"] == "lunch? nda later" and res["matches"][0]["permalink"]
    assert call(world, "search.messages", query="")["error"] == "no_query"
    assert (
        call(world, "search.messages", query="x after:yesterday")["error"] == "invalid_search_date"
    )


def test_schedule_message_fires_with_clock(app, world):
    general = channel_id(world, "general")
    at = int(CLOCK.timestamp()) + 3600
    assert (
        call(world, "chat.scheduleMessage", channel=general, text="later", post_at=at - 7200)[
            "error"
        ]
        == "time_in_past"
    )
    sched = call(world, "chat.scheduleMessage", channel=general, text="later", post_at=at)
    assert sched["scheduled_message_id"].startswith("Q")
    assert call(world, "conversations.history", channel=general)["messages"] == []
    set_clock(app, world.id, CLOCK + timedelta(hours=2))
    msgs = call(world, "conversations.history", channel=general)["messages"]
    assert [m["text"] for m in msgs] == ["later"]


def test_files_upload_and_list(world):
    general = channel_id(world, "general")
    r = world.client.post(
        f"/worlds/{world.id}/slack/api/files.upload",
        data={"channels": general, "title": "Q3", "initial_comment": "numbers"},
        files={"file": ("q3.csv", b"a,b\n1,2\n", "text/csv")},
    ).json()
    assert r["ok"] and r["file"]["name"] == "q3.csv" and r["file"]["channels"] == [general]
    listed = call(world, "files.list", channel=general)
    assert [f["id"] for f in listed["files"]] == [r["file"]["id"]]
    msg = call(world, "conversations.history", channel=general)["messages"][0]
    assert msg["text"] == "numbers" and msg["files"][0]["id"] == r["file"]["id"]
    raw = world.client.get(f"/worlds/{world.id}/slack/files/{r['file']['id']}")
    assert raw.content == b"a,b\n1,2\n"


def test_bad_input_is_a_slack_error_never_500(world):
    for method, params in [
        ("chat.postMessage", {}),
        ("chat.postMessage", {"channel": "general", "text": ""}),
        ("chat.postMessage", {"channel": "general", "text": "x", "blocks": "{not json"}),
        ("conversations.history", {"channel": "general", "limit": "many"}),
        ("conversations.history", {"channel": "general", "oldest": "yesterday"}),
        ("reactions.add", {"channel": "general"}),
        ("files.completeUploadExternal", {"files": "nope"}),
        ("chat.scheduleMessage", {"channel": "general", "text": "x", "post_at": "soon"}),
        ("no.such.method", {}),
    ]:
        r = world.client.post(f"/worlds/{world.id}/slack/api/{method}", json=params)
        assert r.status_code == 200 and r.json()["ok"] is False, (method, r.text)
    r = world.client.post(
        f"/worlds/{world.id}/slack/api/chat.postMessage",
        content=b"[1,2",
        headers={"Content-Type": "application/json"},
    )
    assert r.json()["error"] == "invalid_json"


def test_failed_call_writes_nothing_and_state_export(app, world):
    with world_ctx(app, world.id) as ctx:
        before = export_state(ctx)
    call(world, "conversations.invite", channel="general", users=f"{world.bob},UNOBODY")
    with world_ctx(app, world.id) as ctx:
        assert export_state(ctx) == before
    call(world, "chat.postMessage", channel="general", text="hello")
    with world_ctx(app, world.id) as ctx:
        state = export_state(ctx)
    assert [m["text"] for m in state["messages"]] == ["hello"]
    assert {c["name"] for c in state["channels"]} == {"general", "legal", "secret"}


def test_fuzzed_arguments_never_500(app):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from services.tools.apps.slack.routes import METHODS
    from tests.tools.apps_conftest import json_bodies

    w = make_world(app)
    keys = [
        "channel",
        "text",
        "thread_ts",
        "ts",
        "limit",
        "cursor",
        "oldest",
        "latest",
        "users",
        "name",
        "timestamp",
        "query",
        "count",
        "page",
        "email",
        "user",
        "post_at",
        "blocks",
        "files",
        "channel_id",
        "types",
    ]

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(method=st.sampled_from(sorted(METHODS)), body=json_bodies(keys))
    def check(method, body):
        r = w.client.post(f"/worlds/{w.id}/slack/api/{method}", json=body)
        assert r.status_code == 200 and r.json().get("error") != "internal_error", (method, body)

    check()


def test_topic_purpose_leave_and_my_conversations(world):
    call(world, "conversations.join", channel="legal")
    ch = call(world, "conversations.setTopic", channel="legal", topic="NDAs only")["channel"]
    assert ch["topic"]["value"] == "NDAs only"
    assert call(world, "conversations.setPurpose", channel="legal", purpose="contracts")["ok"]
    mine = {c["name"] for c in call(world, "users.conversations")["channels"]}
    assert mine == {"general", "legal"}
    assert call(world, "conversations.leave", channel="legal")["ok"]
    assert (
        call(world, "conversations.setTopic", channel="legal", topic="x")["error"]
        == "not_in_channel"
    )
    assert call(world, "conversations.leave", channel="general")["error"] == "cant_leave_general"
    assert {c["name"] for c in call(world, "users.conversations")["channels"]} == {"general"}


def test_rename_kick_unarchive_and_unschedule(world):
    ch = call(world, "conversations.create", name="tmp")["channel"]["id"]
    assert call(world, "conversations.rename", channel=ch, name="legal")["error"] == "name_taken"
    assert (
        call(world, "conversations.rename", channel=ch, name="deals")["channel"]["name"] == "deals"
    )
    call(world, "conversations.invite", channel=ch, users=world.bob)
    assert call(world, "conversations.kick", channel=ch, user=world.bob)["ok"]
    assert world.bob not in call(world, "conversations.members", channel=ch)["members"]
    call(world, "conversations.archive", channel=ch)
    assert call(world, "conversations.unarchive", channel=ch)["ok"]
    assert call(world, "conversations.unarchive", channel=ch)["error"] == "not_archived"
    at = int(CLOCK.timestamp()) + 600
    sid = call(world, "chat.scheduleMessage", channel=ch, text="later", post_at=at)[
        "scheduled_message_id"
    ]
    assert call(world, "chat.deleteScheduledMessage", channel=ch, scheduled_message_id=sid)["ok"]
    assert (
        call(world, "chat.deleteScheduledMessage", channel=ch, scheduled_message_id=sid)["error"]
        == "invalid_scheduled_message_id"
    )
    assert call(world, "users.profile.get")["profile"]["email"] == "ava@acme.test"
