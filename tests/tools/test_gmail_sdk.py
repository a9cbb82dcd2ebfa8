"""Contract: Google's official ``google-api-python-client`` works unchanged against the mock,
with its bundled (static) discovery document and an ``api_endpoint`` override, over real HTTP."""

from __future__ import annotations

import base64
import io
import socket
import threading
import time
from collections.abc import Iterator
from email.message import EmailMessage

import httpx
import pytest
from google.oauth2.credentials import Credentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError
from googleapiclient.http import MediaIoBaseUpload

from tests.tools.apps_conftest import ADMIN, ADMIN_KEY


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import uvicorn

    from shared.settings import get_settings

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("K3STACK_DATA_DIR", str(tmp_path_factory.mktemp("sdk")))
        mp.delenv("K3STACK_DATABASE_URL", raising=False)
        mp.setenv("K3STACK_AUTH_ENABLED", "false")
        mp.setenv("K3STACK_TOOLS__API_KEY", ADMIN_KEY)
        get_settings.cache_clear()
        from services.tools.app import create_app

        app = create_app()
    get_settings.cache_clear()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def gmail(server: str):  # type: ignore[no-untyped-def]
    world = httpx.post(
        f"{server}/worlds",
        json={"scenario": "empty", "seed": 0},
        headers=ADMIN,
        timeout=60,  # as apps_conftest.create_world: a loaded runner outgrew httpx's 5 s
    ).json()
    return build(
        "gmail",
        "v1",
        credentials=Credentials(token=world["token"]),
        static_discovery=True,
        client_options={"api_endpoint": f"{server}/worlds/{world['id']}/"},
        cache_discovery=False,
    )


def _raw(to: str, subject: str, body: str = "hello", **headers: str) -> str:
    msg = EmailMessage()
    msg["To"] = to
    msg["Subject"] = subject
    for k, v in headers.items():
        msg[k.replace("_", "-")] = v
    msg.set_content(body)
    return base64.urlsafe_b64encode(msg.as_bytes()).decode()


def test_profile_send_list_get(gmail) -> None:  # type: ignore[no-untyped-def]
    me = gmail.users().getProfile(userId="me").execute()
    assert me["emailAddress"] == "alex.morgan@k3stack.test"
    sent = (
        gmail.users()
        .messages()
        .send(userId="me", body={"raw": _raw("bob@x.test", "SDK hello")})
        .execute()
    )
    assert sent["labelIds"] == ["SENT"]
    listed = gmail.users().messages().list(userId="me", q="subject:sdk from:me").execute()
    assert [m["id"] for m in listed["messages"]] == [sent["id"]]
    full = gmail.users().messages().get(userId="me", id=sent["id"]).execute()
    assert {"name": "Subject", "value": "SDK hello"} in full["payload"]["headers"]
    meta = (
        gmail.users()
        .messages()
        .get(userId="me", id=sent["id"], format="metadata", metadataHeaders=["To"])
        .execute()
    )
    assert meta["payload"]["headers"] == [{"name": "To", "value": "bob@x.test"}]


def test_paging_with_list_next(gmail) -> None:  # type: ignore[no-untyped-def]
    for i in range(5):
        gmail.users().messages().insert(
            userId="me", body={"raw": _raw("me@x", f"n{i}"), "labelIds": ["INBOX"]}
        ).execute()
    req = gmail.users().messages().list(userId="me", maxResults=2)
    ids = []
    while req is not None:
        resp = req.execute()
        ids += [m["id"] for m in resp.get("messages", [])]
        req = gmail.users().messages().list_next(req, resp)
    assert len(ids) == len(set(ids)) == 5


def test_labels_modify_threads_trash(gmail) -> None:  # type: ignore[no-untyped-def]
    users = gmail.users()
    lab = users.labels().create(userId="me", body={"name": "SDK/Label"}).execute()
    m1 = (
        users.messages()
        .insert(
            userId="me",
            body={
                "raw": _raw("me@x", "thread", Message_ID="<t1@x>"),
                "labelIds": ["INBOX", "UNREAD"],
            },
        )
        .execute()
    )
    m2 = (
        users.messages()
        .send(
            userId="me",
            body={"raw": _raw("a@x", "Re: thread", In_Reply_To="<t1@x>", References="<t1@x>")},
        )
        .execute()
    )
    assert m2["threadId"] == m1["threadId"]
    users.messages().modify(
        userId="me", id=m1["id"], body={"addLabelIds": [lab["id"]], "removeLabelIds": ["UNREAD"]}
    ).execute()
    users.messages().batchModify(
        userId="me", body={"ids": [m1["id"], m2["id"]], "addLabelIds": ["STARRED"]}
    ).execute()
    thread = users.threads().get(userId="me", id=m1["threadId"], format="minimal").execute()
    assert [set(m["labelIds"]) for m in thread["messages"]] == [
        {"INBOX", lab["id"], "STARRED"},
        {"SENT", "STARRED"},
    ]
    assert (
        users.threads().list(userId="me", q="label:sdk-label").execute()["threads"][0]["id"]
        == m1["threadId"]
    )
    users.threads().trash(userId="me", id=m1["threadId"]).execute()
    assert users.messages().list(userId="me", q="thread").execute().get("messages") is None
    users.threads().untrash(userId="me", id=m1["threadId"]).execute()
    users.labels().patch(userId="me", id=lab["id"], body={"name": "Renamed"}).execute()
    assert "Renamed" in {x["name"] for x in users.labels().list(userId="me").execute()["labels"]}
    users.labels().delete(userId="me", id=lab["id"]).execute()
    hist = users.history().list(userId="me", startHistoryId=1000).execute()
    assert any("labelsRemoved" in h for h in hist["history"])


def test_drafts_and_attachments(gmail) -> None:  # type: ignore[no-untyped-def]
    msg = EmailMessage()
    msg["To"] = "c@x.test"
    msg["Subject"] = "with file"
    msg.set_content("see file")
    msg.add_attachment(b"col1,col2\n1,2\n", maintype="text", subtype="csv", filename="data.csv")
    raw = base64.urlsafe_b64encode(msg.as_bytes()).decode()
    draft = gmail.users().drafts().create(userId="me", body={"message": {"raw": raw}}).execute()
    assert gmail.users().drafts().list(userId="me").execute()["drafts"][0]["id"] == draft["id"]
    sent = gmail.users().drafts().send(userId="me", body={"id": draft["id"]}).execute()
    full = gmail.users().messages().get(userId="me", id=sent["id"]).execute()
    part = next(p for p in full["payload"]["parts"] if p["filename"] == "data.csv")
    att = (
        gmail.users()
        .messages()
        .attachments()
        .get(userId="me", messageId=sent["id"], id=part["body"]["attachmentId"])
        .execute()
    )
    assert base64.urlsafe_b64decode(att["data"] + "==") == b"col1,col2\n1,2\n"


def test_media_upload_route(server: str) -> None:
    """The SDK sends media uploads to ``/upload/gmail/v1/...`` at the host root and keeps the
    discovery document's https scheme (it swaps only the host), so against a plain-http mock
    it needs TLS in front; the route it targets is exercised here directly."""
    world = httpx.post(f"{server}/worlds", json={}, headers=ADMIN, timeout=60).json()
    raw = b"To: d@x.test\r\nSubject: uploaded\r\n\r\nvia media upload\r\n"
    resp = httpx.post(
        f"{server}/upload/gmail/v1/users/me/messages/send?uploadType=media",
        content=raw,
        headers={"Authorization": f"Bearer {world['token']}", "Content-Type": "message/rfc822"},
        timeout=60,
    )
    assert resp.status_code == 200 and resp.json()["labelIds"] == ["SENT"]
    media = MediaIoBaseUpload(io.BytesIO(raw), mimetype="message/rfc822")
    assert media.size() == len(raw)


def test_errors_surface_as_http_error(gmail) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HttpError) as err:
        gmail.users().messages().get(userId="me", id="nope").execute()
    assert err.value.resp.status == 404
    assert err.value.error_details[0]["reason"] == "notFound"
    with pytest.raises(HttpError) as err:
        gmail.users().messages().list(userId="me", q="(unbalanced").execute()
    assert err.value.resp.status == 400 and "Invalid query" in err.value.reason
