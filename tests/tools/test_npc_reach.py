"""An NPC reacts only to mail that reached them: the requester's follow-up is armed by a
reply addressed to them in the request's thread, not by one sent to someone else."""

from __future__ import annotations

from datetime import timedelta

from tests.tools.conftest import create_world


def _follow_up(w):
    evs = w.client.get(f"/worlds/{w.id}/events").json()["events"]
    return next(e for e in evs if e["event_id"] == "approval-0-follow-up")


def test_a_reply_to_someone_else_arms_no_follow_up(tools_client):
    w = create_world(tools_client, "hr_leave", 0)
    ev = _follow_up(w)
    msgid, requester = ev["trigger"]["where"]["thread_msgids"], ev["trigger"]["where"]["to"]
    api = w.api
    api.advance_to(api.clock() + timedelta(days=1))  # the request arrives
    request = api.gmail_by_msgid(msgid)
    api.gmail_reply(request, "Approved.", to=["someone.else@acme.test"])
    w.advance(by="1m")  # triggers are matched as the clock moves
    assert _follow_up(w)["status"] == "waiting"  # it went elsewhere: nothing to react to
    api.gmail_reply(request, "Approved.")  # to the requester
    w.advance(by="1m")
    assert requester in api.header(request, "From").lower()
    assert _follow_up(w)["status"] in ("due", "fired")
