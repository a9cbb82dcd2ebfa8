"""Contract: the official ``slack_sdk.WebClient`` works unchanged against the mock Slack."""

from __future__ import annotations

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from services.tools.apps.slack import actions as slack
from tests.tools.apps_conftest import create_world, service_server, world_ctx


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with service_server(tmp_path_factory.mktemp("slack-sdk")) as (app, url):
        yield app, url


@pytest.fixture
def client(server):
    app, url = server
    wid, token = create_world(url)
    with world_ctx(app, wid) as ctx:
        slack.setup_workspace(ctx, agent_name="ava", agent_email="ava@acme.test")
        bob = slack.create_user(ctx, name="bob", email="bob@acme.test")["id"]
    c = WebClient(token=token, base_url=f"{url}/worlds/{wid}/slack/api/")
    c.bob = bob
    return c


def test_post_thread_react_search(client):
    assert client.auth_test()["user"] == "ava"
    general = client.conversations_list()["channels"][0]["id"]
    root = client.chat_postMessage(channel=general, text="Quarterly numbers are in")
    client.chat_postMessage(channel=general, text="thanks!", thread_ts=root["ts"])
    replies = client.conversations_replies(channel=general, ts=root["ts"])
    assert [m["text"] for m in replies["messages"]] == ["Quarterly numbers are in", "thanks!"]
    client.reactions_add(channel=general, timestamp=root["ts"], name="tada")
    assert (
        client.reactions_get(channel=general, timestamp=root["ts"])["message"]["reactions"][0][
            "name"
        ]
        == "tada"
    )
    client.pins_add(channel=general, timestamp=root["ts"])
    assert len(client.pins_list(channel=general)["items"]) == 1
    found = client.search_messages(query="quarterly in:#general")
    assert found["messages"]["total"] == 1
    link = client.chat_getPermalink(channel=general, message_ts=root["ts"])["permalink"]
    assert root["ts"].replace(".", "") in link
    upd = client.chat_update(channel=general, ts=root["ts"], text="Quarterly numbers are final")
    assert upd["message"]["edited"]
    assert client.users_lookupByEmail(email="bob@acme.test")["user"]["id"] == client.bob


def test_cursor_pagination_via_sdk_iterator(client):
    general = client.conversations_list()["channels"][0]["id"]
    for i in range(5):
        client.chat_postMessage(channel=general, text=f"m{i}")
    # SlackResponse iterates by following response_metadata.next_cursor (updating itself)
    pages = [
        [m["text"] for m in page["messages"]]
        for page in client.conversations_history(channel=general, limit=2)
    ]
    assert pages == [["m4", "m3"], ["m2", "m1"], ["m0"]]


def test_channels_dm_schedule_and_errors(client):
    room = client.conversations_create(name="sdk-room", is_private=True)["channel"]
    client.conversations_invite(channel=room["id"], users=[client.bob])
    assert client.bob in client.conversations_members(channel=room["id"])["members"]
    dm = client.conversations_open(users=[client.bob])["channel"]["id"]
    client.chat_postMessage(channel=dm, text="psst")
    now = int(float(client.chat_postMessage(channel=room["id"], text="now")["ts"]))
    sched = client.chat_scheduleMessage(channel=room["id"], text="later", post_at=now + 600)
    assert sched["scheduled_message_id"]
    with pytest.raises(SlackApiError) as err:
        client.chat_postMessage(channel="C0NOPE", text="x")
    assert err.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError) as err:
        client.conversations_archive(channel="general")
    assert err.value.response["error"] == "cant_archive_general"
    bad = WebClient(token="not-a-token", base_url=client.base_url)
    with pytest.raises(SlackApiError) as err:
        bad.auth_test()
    assert err.value.response["error"] == "invalid_auth"


def test_files_upload_v2_and_v1(client):
    general = client.conversations_list()["channels"][0]["id"]
    up = client.files_upload_v2(
        channel=general,
        content="a,b\n1,2\n",
        filename="q3.csv",
        title="Q3",
        initial_comment="numbers",
    )
    fid = up["file"]["id"]
    listed = client.files_list(channel=general)["files"]
    assert [f["id"] for f in listed] == [fid] and listed[0]["size"] == 8
    last = client.conversations_history(channel=general, limit=1)["messages"][0]
    assert last["text"] == "numbers" and last["files"][0]["id"] == fid
    info = client.files_info(file=fid)["file"]
    assert info["title"] == "Q3" and info["name"] == "q3.csv"


def test_parallel_calls_on_one_world(client):
    """Agents call tools in parallel: every call lands, with its own ts."""
    from concurrent.futures import ThreadPoolExecutor

    general = client.conversations_list()["channels"][0]["id"]
    with ThreadPoolExecutor(8) as pool:
        posted = list(
            pool.map(lambda i: client.chat_postMessage(channel=general, text=f"p{i}"), range(24))
        )
    assert all(p["ok"] for p in posted)
    assert len({p["ts"] for p in posted}) == 24
    assert len(client.conversations_history(channel=general, limit=100)["messages"]) == 24
