"""Gmail semantics: the q search language, paging, threading, labels, drafts, history,
formats and Google's error body."""

from __future__ import annotations

import base64

import pytest

from services.tools.apps.gmail.search import SearchError, parse_query
from tests.tools.conftest import ToolsWorld, raw_mail

ME = "alex.morgan@k3stack.test"


def _insert(
    w: ToolsWorld, *, labels: list[str] | None = None, date_header: bool = True, **kw
) -> dict:
    raw = raw_mail(**kw)
    params = {"internalDateSource": "dateHeader"} if date_header else {}
    return w.g(
        "POST",
        "messages",
        json={"raw": raw, "labelIds": labels or ["INBOX", "UNREAD"]},
        params=params,
    )


@pytest.fixture
def mailbox(world: ToolsWorld) -> dict[str, str]:
    """A small mailbox: a few messages with different senders, dates, labels, attachments."""
    ids = {}
    ids["invoice"] = _insert(
        world,
        sender="Amy Pond <amy@acme.test>",
        to=ME,
        subject="Invoice March",
        body="Please find the invoice attached. Total due 420 EUR.",
        headers={"Date": "Mon, 03 Mar 2025 10:00:00 +0000"},
        attachments=[("invoice-march.pdf", b"%PDF-1.4 fake", "application/pdf")],
    )["id"]
    ids["dinner"] = _insert(
        world,
        sender="David Tennant <david@example.test>",
        to=ME,
        cc="rose@example.test",
        subject="Dinner on Friday?",
        body="Are we still on for dinner and a movie?",
        headers={"Date": "Tue, 31 Dec 2024 18:00:00 +0000"},
        labels=["INBOX"],
    )["id"]
    ids["movie"] = _insert(
        world,
        sender="Rose Tyler <rose@example.test>",
        to=ME,
        subject="Movie tickets",
        body="I booked the movie. Seats 12 and 13.",
        headers={"Date": "Wed, 01 Jan 2025 09:00:00 +0000"},
        labels=["INBOX", "STARRED"],
    )["id"]
    ids["spam"] = _insert(
        world,
        sender="prize@spam.test",
        to=ME,
        subject="You won a dinner",
        body="Click here",
        headers={"Date": "Thu, 02 Jan 2025 09:00:00 +0000"},
        labels=["SPAM"],
    )["id"]
    ids["report"] = _insert(
        world,
        sender="Amy Pond <amy@acme.test>",
        to="team@acme.test",
        subject="Quarterly report",
        body="The quarterly report is ready: revenue up.",
        headers={"Date": "Sun, 05 Jan 2025 12:00:00 +0000"},
        attachments=[("report.xlsx", b"PK..", "application/vnd.ms-excel")],
    )["id"]
    return ids


def _q(w: ToolsWorld, q: str, **params) -> set[str]:
    out = w.g("GET", "messages", params={"q": q, **params})
    return {m["id"] for m in out.get("messages", [])}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("from:amy", {"invoice", "report"}),
        ("from:amy@acme.test subject:invoice", {"invoice"}),
        ("to:team@acme.test", {"report"}),
        ("cc:rose", {"dinner"}),
        ("subject:(dinner friday)", {"dinner"}),
        ("subject:{invoice report}", {"invoice", "report"}),
        ("is:unread", {"invoice", "report"}),
        ("is:read", {"dinner", "movie"}),
        ("is:starred", {"movie"}),
        ("in:spam", {"spam"}),
        ("dinner", {"dinner"}),
        ("dinner in:anywhere", {"dinner", "spam"}),
        ("label:starred", {"movie"}),
        ("has:attachment", {"invoice", "report"}),
        ("filename:pdf", {"invoice"}),
        ("filename:report.xlsx", {"report"}),
        ('"quarterly report"', {"report"}),
        ('"report quarterly"', set()),
        ("movie -from:rose", {"dinner"}),
        ("from:rose OR from:david", {"dinner", "movie"}),
        ("{from:rose from:david}", {"dinner", "movie"}),
        ("(from:amy OR from:rose) -has:attachment", {"movie"}),
        ("movie NOT tickets", {"dinner"}),
        ("after:2025/01/01", {"invoice", "movie", "report"}),
        ("before:2025/01/01", {"dinner"}),
        ("after:2025/01/01 before:2025/01/06", {"movie", "report"}),
        ("older_than:30d", {"dinner", "movie", "report"}),
        ("newer_than:1y", {"invoice", "dinner", "movie", "report"}),
        ("larger:1 smaller:100M", {"invoice", "dinner", "movie", "report"}),
        ("in:inbox -is:starred -label:unread", {"dinner"}),
        ("unknownop:thing", set()),
    ],
)
def test_search_syntax(
    world: ToolsWorld, mailbox: dict[str, str], query: str, expected: set[str]
) -> None:
    # The world clock is 2025-01-06 08:00; advance it past the invoice for relative dates.
    if query.startswith(("older_than", "newer_than")):
        world.advance(to="2025-03-10T00:00:00Z")
    assert _q(world, query) == {mailbox[k] for k in expected}, query


def test_search_label_ids_and_spam_trash(world: ToolsWorld, mailbox: dict[str, str]) -> None:
    assert {
        m["id"] for m in world.g("GET", "messages", params={"labelIds": ["STARRED"]})["messages"]
    } == {mailbox["movie"]}
    assert mailbox["spam"] not in _q(world, "")
    assert mailbox["spam"] in _q(world, "", includeSpamTrash="true")
    world.g("POST", f"messages/{mailbox['dinner']}/trash")
    assert mailbox["dinner"] not in _q(world, "dinner")
    assert mailbox["dinner"] in _q(world, "in:trash")
    world.g("POST", f"messages/{mailbox['dinner']}/untrash")
    assert mailbox["dinner"] in _q(world, "dinner")


def test_user_label_search(world: ToolsWorld, mailbox: dict[str, str]) -> None:
    lab = world.g("POST", "labels", json={"name": "Finance/Invoices"})
    world.g("POST", f"messages/{mailbox['invoice']}/modify", json={"addLabelIds": [lab["id"]]})
    assert _q(world, "label:finance-invoices") == {mailbox["invoice"]}
    assert _q(world, "label:Finance/Invoices") == {mailbox["invoice"]}
    assert _q(world, "has:userlabels") == {mailbox["invoice"]}


@pytest.mark.parametrize(
    "bad",
    [
        "(from:a",
        "from:a)",
        "a OR",
        "OR b",
        "after:yesterday",
        "older_than:3 days",
        "larger:huge",
        "{a b",
    ],
)
def test_malformed_queries_are_400(world: ToolsWorld, bad: str) -> None:
    resp = world.gmail("GET", "messages", params={"q": bad})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["status"] == "INVALID_ARGUMENT" and err["errors"][0]["reason"] == "badRequest"


def test_parser_precedence() -> None:
    # OR binds tighter than juxtaposition, as in Gmail.
    assert str(parse_query("a b OR c")) == "(a (b OR c))"
    assert str(parse_query("-a OR b")) == "((-a OR b))"
    assert (
        str(parse_query("subject:(x y) from:{p q}")) == "((subject:x subject:y) (from:p OR from:q))"
    )
    assert parse_query("   ") is None
    with pytest.raises(SearchError):
        parse_query("(" * 100 + "a" + ")" * 100)


def test_paging(world: ToolsWorld) -> None:
    for i in range(7):
        _insert(
            world, subject=f"page {i}", headers={"Date": f"Mon, 0{i + 1} Dec 2024 10:00:00 +0000"}
        )
    seen, token, pages = [], None, 0
    while True:
        params = {"maxResults": 3, **({"pageToken": token} if token else {})}
        out = world.g("GET", "messages", params=params)
        seen += [m["id"] for m in out["messages"]]
        pages += 1
        token = out.get("nextPageToken")
        if not token:
            break
    assert pages == 3 and len(seen) == len(set(seen)) == 7
    # Newest first.
    subjects = [
        world.g("GET", f"messages/{i}", params={"format": "metadata"})["payload"]["headers"]
        for i in seen
    ]
    assert [h["value"] for hs in subjects for h in hs if h["name"] == "Subject"][0] == "page 6"
    assert world.gmail("GET", "messages", params={"pageToken": "garbage!"}).status_code == 400
    assert world.gmail("GET", "messages", params={"maxResults": 0}).status_code == 400


def test_threading_by_references(world: ToolsWorld) -> None:
    first = _insert(
        world,
        sender="amy@acme.test",
        to=ME,
        subject="Plan",
        headers={"Message-ID": "<plan-1@acme.test>"},
    )
    reply = world.g(
        "POST",
        "messages/send",
        json={
            "raw": raw_mail(
                to="amy@acme.test",
                subject="Re: Plan",
                headers={"In-Reply-To": "<plan-1@acme.test>", "References": "<plan-1@acme.test>"},
            )
        },
    )
    assert reply["threadId"] == first["threadId"] and reply["labelIds"] == ["SENT"]
    third = _insert(
        world,
        sender="amy@acme.test",
        to=ME,
        subject="Re: Plan",
        headers={"References": "<plan-1@acme.test> <other@x>"},
    )
    assert third["threadId"] == first["threadId"]
    unrelated = _insert(world, sender="amy@acme.test", to=ME, subject="Plan")
    assert unrelated["threadId"] != first["threadId"]
    thread = world.g("GET", f"threads/{first['threadId']}")
    assert [m["id"] for m in thread["messages"]] == [first["id"], reply["id"], third["id"]]
    threads = world.g("GET", "threads", params={"q": "subject:plan"})["threads"]
    assert {t["id"] for t in threads} == {first["threadId"], unrelated["threadId"]}
    # threadId given explicitly must exist.
    resp = world.gmail("POST", "messages/send", json={"raw": raw_mail(), "threadId": "nope"})
    assert resp.status_code == 404
    # Thread-level modify and trash.
    world.g("POST", f"threads/{first['threadId']}/modify", json={"addLabelIds": ["STARRED"]})
    assert all(
        "STARRED" in m["labelIds"]
        for m in world.g("GET", f"threads/{first['threadId']}", params={"format": "minimal"})[
            "messages"
        ]
    )
    world.g("POST", f"threads/{first['threadId']}/trash")
    assert first["threadId"] not in {t["id"] for t in world.g("GET", "threads").get("threads", [])}
    world.g("DELETE", f"threads/{first['threadId']}")
    assert world.gmail("GET", f"threads/{first['threadId']}").status_code == 404


def test_formats_and_attachment(world: ToolsWorld) -> None:
    m = _insert(
        world,
        sender="amy@acme.test",
        to=ME,
        subject="Files",
        body="see attached",
        attachments=[("a.txt", b"hello attachment", "text/plain")],
    )
    full = world.g("GET", f"messages/{m['id']}")
    assert full["payload"]["mimeType"] == "multipart/mixed"
    parts = full["payload"]["parts"]
    assert (
        base64.urlsafe_b64decode(parts[0]["body"]["data"] + "==").decode().strip() == "see attached"
    )
    att = parts[1]
    assert att["filename"] == "a.txt" and "attachmentId" in att["body"]
    got = world.g("GET", f"messages/{m['id']}/attachments/{att['body']['attachmentId']}")
    assert base64.urlsafe_b64decode(got["data"] + "==") == b"hello attachment"
    assert world.gmail("GET", f"messages/{m['id']}/attachments/bogus").status_code == 400
    meta = world.g(
        "GET", f"messages/{m['id']}", params={"format": "metadata", "metadataHeaders": ["Subject"]}
    )
    assert meta["payload"]["headers"] == [{"name": "Subject", "value": "Files"}]
    minimal = world.g("GET", f"messages/{m['id']}", params={"format": "minimal"})
    assert "payload" not in minimal and minimal["snippet"].startswith("see attached")
    raw = world.g("GET", f"messages/{m['id']}", params={"format": "raw"})["raw"]
    assert b"Subject: Files" in base64.urlsafe_b64decode(raw + "==")
    assert world.gmail("GET", f"messages/{m['id']}", params={"format": "weird"}).status_code == 400


def test_labels_crud_and_modify(world: ToolsWorld, mailbox: dict[str, str]) -> None:
    labels = {lab["id"] for lab in world.g("GET", "labels")["labels"]}
    assert {"INBOX", "SENT", "TRASH", "SPAM", "UNREAD", "STARRED", "DRAFT"} <= labels
    lab = world.g("POST", "labels", json={"name": "Travel", "labelListVisibility": "labelShow"})
    assert lab["type"] == "user" and lab["id"].startswith("Label_")
    assert world.gmail("POST", "labels", json={"name": "travel"}).status_code == 409
    assert world.gmail("POST", "labels", json={"name": "INBOX"}).status_code == 400
    assert (
        world.gmail(
            "POST", "labels", json={"name": "x", "messageListVisibility": "bogus"}
        ).status_code
        == 400
    )
    assert world.g("PATCH", f"labels/{lab['id']}", json={"name": "Trips"})["name"] == "Trips"
    assert world.gmail("PUT", f"labels/{lab['id']}", json={}).status_code == 400
    assert world.gmail("DELETE", "labels/INBOX").status_code == 400
    assert world.gmail("PATCH", "labels/INBOX", json={"name": "x"}).status_code == 400
    world.g(
        "POST",
        "messages/batchModify",
        json={
            "ids": [mailbox["dinner"], mailbox["movie"]],
            "addLabelIds": [lab["id"]],
            "removeLabelIds": ["INBOX"],
        },
    )
    got = world.g("GET", f"labels/{lab['id']}")
    assert got["messagesTotal"] == 2 and got["threadsTotal"] == 2
    assert world.g("GET", "labels/INBOX")["messagesTotal"] == 2  # invoice, report
    # Unknown or fixed labels are refused.
    resp = world.gmail(
        "POST", f"messages/{mailbox['dinner']}/modify", json={"addLabelIds": ["Label_999"]}
    )
    assert resp.status_code == 400 and "Invalid label" in resp.json()["error"]["message"]
    assert (
        world.gmail(
            "POST", f"messages/{mailbox['dinner']}/modify", json={"addLabelIds": ["SENT"]}
        ).status_code
        == 400
    )
    world.g("DELETE", f"labels/{lab['id']}")
    assert (
        lab["id"]
        not in world.g("GET", f"messages/{mailbox['dinner']}", params={"format": "minimal"})[
            "labelIds"
        ]
    )
    assert world.gmail("GET", f"labels/{lab['id']}").status_code == 404


def test_messages_are_immutable_except_labels(world: ToolsWorld, mailbox: dict[str, str]) -> None:
    before = world.g("GET", f"messages/{mailbox['invoice']}", params={"format": "raw"})
    world.g(
        "POST",
        f"messages/{mailbox['invoice']}/modify",
        json={"addLabelIds": ["STARRED"], "removeLabelIds": ["UNREAD"], "raw": "aGk"},
    )
    after = world.g("GET", f"messages/{mailbox['invoice']}", params={"format": "raw"})
    assert after["raw"] == before["raw"] and after["snippet"] == before["snippet"]
    assert set(after["labelIds"]) == {"INBOX", "STARRED"}
    assert int(after["historyId"]) > int(before["historyId"])
    # No route edits a message; PUT/PATCH answer 405 in Google's shape.
    resp = world.gmail("PUT", f"messages/{mailbox['invoice']}", json={"raw": "aGk"})
    assert resp.status_code == 405 and "error" in resp.json()


def test_delete_and_batch_delete(world: ToolsWorld, mailbox: dict[str, str]) -> None:
    assert world.gmail("DELETE", f"messages/{mailbox['spam']}").status_code == 204
    assert world.gmail("GET", f"messages/{mailbox['spam']}").status_code == 404
    assert world.gmail("DELETE", f"messages/{mailbox['spam']}").status_code == 404
    world.g("POST", "messages/batchDelete", json={"ids": [mailbox["dinner"], mailbox["movie"]]})
    assert _q(world, "in:anywhere") == {mailbox["invoice"], mailbox["report"]}


def test_drafts_lifecycle(world: ToolsWorld) -> None:
    d = world.g(
        "POST", "drafts", json={"message": {"raw": raw_mail(to="bob@b.test", subject="Draft v1")}}
    )
    assert d["id"].startswith("r") and d["message"]["labelIds"] == ["DRAFT"]
    assert [x["id"] for x in world.g("GET", "drafts")["drafts"]] == [d["id"]]
    d2 = world.g(
        "PUT",
        f"drafts/{d['id']}",
        json={"message": {"raw": raw_mail(to="bob@b.test", subject="Draft v2")}},
    )
    assert d2["id"] == d["id"] and d2["message"]["id"] != d["message"]["id"]
    assert world.gmail("GET", f"messages/{d['message']['id']}").status_code == 404
    got = world.g("GET", f"drafts/{d['id']}", params={"format": "metadata"})
    assert {"name": "Subject", "value": "Draft v2"} in got["message"]["payload"]["headers"]
    assert world.g("GET", "drafts", params={"q": "subject:v2"})["drafts"][0]["id"] == d["id"]
    sent = world.g("POST", "drafts/send", json={"id": d["id"]})
    assert sent["labelIds"] == ["SENT"]
    assert world.gmail("GET", f"drafts/{d['id']}").status_code == 404
    assert world.g("GET", "drafts").get("drafts") is None
    d3 = world.g("POST", "drafts", json={"message": {"raw": raw_mail()}})
    assert world.gmail("DELETE", f"drafts/{d3['id']}").status_code == 204
    assert world.gmail("GET", f"messages/{d3['message']['id']}").status_code == 404
    assert world.gmail("POST", "drafts", json={}).status_code == 400
    assert world.gmail("POST", "drafts/send", json={"id": "rnope"}).status_code == 404


def test_history_list(world: ToolsWorld) -> None:
    start = int(world.g("GET", "profile")["historyId"])
    m = _insert(world, subject="h1")
    world.g("POST", f"messages/{m['id']}/modify", json={"addLabelIds": ["STARRED"]})
    world.g("POST", f"messages/{m['id']}/modify", json={"removeLabelIds": ["UNREAD"]})
    out = world.g("GET", "history", params={"startHistoryId": start})
    kinds = [next(k for k in h if k not in ("id", "messages")) for h in out["history"]]
    assert kinds == ["messagesAdded", "labelsAdded", "labelsRemoved"]
    assert out["history"][1]["labelsAdded"][0]["labelIds"] == ["STARRED"]
    only = world.g(
        "GET", "history", params={"startHistoryId": start, "historyTypes": ["labelRemoved"]}
    )
    assert len(only["history"]) == 1
    paged = world.g("GET", "history", params={"startHistoryId": start, "maxResults": 2})
    assert len(paged["history"]) == 2 and paged["nextPageToken"]
    assert world.gmail("GET", "history", params={"startHistoryId": 10**9}).status_code == 404
    assert world.gmail("GET", "history").status_code == 400
    assert (
        world.gmail(
            "GET", "history", params={"startHistoryId": start, "historyTypes": ["bogus"]}
        ).status_code
        == 400
    )


def test_send_validation_and_user_id(world: ToolsWorld) -> None:
    assert world.gmail("POST", "messages/send", json={}).status_code == 400
    assert world.gmail("POST", "messages/send", json={"raw": "!!!not base64!!!"}).status_code == 400
    no_rcpt = base64.urlsafe_b64encode(b"Subject: x\r\n\r\nbody").decode()
    assert world.gmail("POST", "messages/send", json={"raw": no_rcpt}).status_code == 400
    resp = world.client.get(
        f"/worlds/{world.id}/gmail/v1/users/someone@else.test/profile", headers=world.auth
    )
    assert resp.status_code == 403 and resp.json()["error"]["message"].startswith(
        "Delegation denied"
    )
    ok = world.client.get(f"/worlds/{world.id}/gmail/v1/users/{ME}/profile", headers=world.auth)
    assert ok.status_code == 200 and ok.json()["emailAddress"] == ME
    # Sent mail gets From, Date and Message-ID like Gmail adds them.
    sent = world.g("POST", "messages/send", json={"raw": raw_mail(to="x@y.test")})
    hdrs = {h["name"] for h in world.g("GET", f"messages/{sent['id']}")["payload"]["headers"]}
    assert {"From", "Date", "Message-ID"} <= hdrs
    # Mail to oneself lands in the inbox too.
    self_sent = world.g("POST", "messages/send", json={"raw": raw_mail(to=ME)})
    assert set(self_sent["labelIds"]) == {"SENT", "INBOX", "UNREAD"}


def test_errors_use_google_shape(world: ToolsWorld) -> None:
    resp = world.gmail("GET", "messages/doesnotexist")
    body = resp.json()
    assert resp.status_code == 404
    assert body == {
        "error": {
            "code": 404,
            "message": "Requested entity was not found.",
            "errors": [
                {
                    "message": "Requested entity was not found.",
                    "domain": "global",
                    "reason": "notFound",
                }
            ],
            "status": "NOT_FOUND",
        }
    }
    resp = world.gmail("POST", "messages/batchModify", json={"ids": "notalist"})
    assert resp.status_code == 400 and resp.json()["error"]["status"] == "INVALID_ARGUMENT"
    resp = world.gmail("GET", "nonexistent/route")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == 404


def _strict_getaddresses(values: list[str]) -> list[tuple[str, str]]:
    """CPython 3.11.10+'s (and Debian 12's patched 3.11.2's) strict getaddresses: a field list
    whose comma count disagrees with what parsed (an empty Cc joined in) answers ('', '')."""
    from email.utils import getaddresses

    found = getaddresses(values)
    if len(found) != sum(v.count(",") + 1 for v in values):
        return [("", "")]
    return found


def test_recipients_survive_a_strict_address_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.tools.apps.gmail import mime

    monkeypatch.setattr(mime, "getaddresses", _strict_getaddresses)
    assert mime.addresses("Ann <Ann@x.test>", "", "") == ["ann@x.test"]
    assert mime.addresses("a@x.test, b@y.test", "c@z.test") == ["a@x.test", "b@y.test", "c@z.test"]
    assert mime.addresses("", "  ") == []
