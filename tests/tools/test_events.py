"""The event engine: scheduled and triggered events in order, next-morning triggers, checks
frozen at their declared time, collateral-damage detection, scripted and model NPCs, judge
checks exposed for the verifier, and broken effects reported without breaking the world."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from services.tools.events.spec import Check, Effect, EventSpec, Person, ScenarioInstance, Trigger
from services.tools.scenarios import SCENARIOS
from services.tools.scenarios.base import Scenario
from tests.tools.conftest import create_world, keyed

T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
ME = Person(name="Pat Doe", email="pat@corp.test")
BOSS = {"name": "Bo Ss", "email": "boss@corp.test"}


class MiniScenario(Scenario):
    name = "test_mini"
    title = "engine test"
    domain = "test"
    description = "two mails, a triggered answer, a deadline check, a judge check"

    def build(self, seed: int) -> ScenarioInstance:
        ask = "<ask@corp.test>"
        return ScenarioInstance(
            name=self.name,
            seed=seed,
            title=self.title,
            domain="test",
            description=self.description,
            start=T0,
            end=T0 + timedelta(days=3),
            user=ME,
            setup=[Effect(op="gmail.setup_mailbox", args={"email": ME.email})],
            events=[
                EventSpec(
                    id="late",
                    title="second mail",
                    at=T0 + timedelta(hours=5),
                    effects=[
                        Effect(
                            op="gmail.deliver",
                            args={"from": BOSS, "subject": "Second", "body": "b"},
                        )
                    ],
                    checks=[
                        Check(
                            id="late.c0",
                            kind="gmail.labeled",
                            args={"msgid": "<x@y>", "has": ["INBOX"]},
                        )
                    ],
                ),
                EventSpec(
                    id="ask",
                    title="boss asks",
                    at=T0 + timedelta(hours=1),
                    effects=[
                        Effect(
                            op="gmail.deliver",
                            args={
                                "from": BOSS,
                                "subject": "Budget?",
                                "body": "Is it approved?",
                                "message_id": ask,
                            },
                        )
                    ],
                    checks=[
                        Check(
                            id="ask.c0",
                            kind="gmail.sent",
                            at=T0 + timedelta(hours=8),
                            args={"in_thread_of": ask, "body_contains": ["yes"]},
                        ),
                        Check(
                            id="ask.judge",
                            kind="judge",
                            rubric="Polite?",
                            inputs=[{"app": "gmail", "in_thread_of": ask}],
                        ),
                    ],
                ),
                EventSpec(
                    id="answer",
                    title="boss answers next morning",
                    trigger=Trigger(
                        app="gmail",
                        action="messages.send",
                        where={"thread_msgids": ask},
                        next_morning="09:00",
                    ),
                    effects=[
                        Effect(
                            op="npc.reply",
                            args={
                                "persona": BOSS,
                                "thread_msgid": ask,
                                "model": True,
                                "message_id": "<answer@corp.test>",
                                "body": "default",
                                "script": [
                                    {
                                        "if_contains": ["yes", "friday"],
                                        "text": "Great, Friday it is.",
                                    },
                                    {"text": "Thanks."},
                                ],
                            },
                        )
                    ],
                    checks=[
                        Check(
                            id="answer.c0",
                            kind="world.collateral",
                            args={
                                "allow": {
                                    "gmail_messages": ["insert"],
                                    "gmail_history": ["insert"],
                                    "gmail_mailboxes": ["update"],
                                }
                            },
                        )
                    ],
                ),
                EventSpec(
                    id="broken",
                    title="an effect that fails",
                    at=T0 + timedelta(hours=2),
                    effects=[Effect(op="gmail.deliver", args={"subject": "no sender"})],
                    checks=[Check(id="broken.c0", kind="gmail.sent", args={})],
                ),
            ],
        )


@pytest.fixture(autouse=True)
def _mini(monkeypatch) -> None:
    monkeypatch.setitem(SCENARIOS, "test_mini", MiniScenario())


def _events(w) -> dict:
    return {e["event_id"]: e for e in w.client.get(f"/worlds/{w.id}/events").json()["events"]}


def _reply(w, text: str) -> None:
    parent = w.api.gmail_by_msgid("<ask@corp.test>")
    w.api.gmail_reply(parent, text)


def test_events_fire_in_time_order_and_triggers_arm(tools_client) -> None:
    w = create_world(tools_client, "test_mini")
    out = w.advance(by="3h")
    assert out["fired"] == ["ask", "broken"]  # by due time, not declaration order
    evs = _events(w)
    assert evs["broken"]["status"] == "failed" and "KeyError" in evs["broken"]["error"]
    assert evs["answer"]["status"] == "waiting"
    _reply(w, "Yes, approved, let's start Friday.")
    out = w.advance(by="1h")
    assert out["fired"] == []
    evs = _events(w)
    assert evs["answer"]["status"] == "due"
    assert evs["answer"]["due_at"].startswith("2025-03-04T09:00")  # next morning
    out = w.advance(to="2025-03-04T10:00:00Z")
    assert out["fired"] == ["late", "answer"]
    answer = w.api.gmail_by_msgid("<answer@corp.test>")
    assert "Great, Friday it is." in w.api.body_text(answer)  # scripted branch
    assert answer["threadId"] == w.api.gmail_by_msgid("<ask@corp.test>")["threadId"]


def test_default_script_branch(tools_client) -> None:
    w = create_world(tools_client, "test_mini")
    w.advance(by="2h")
    _reply(w, "Yes.")
    w.advance(by="1d")
    assert w.api.body_text(w.api.gmail_by_msgid("<answer@corp.test>")).strip() == "Thanks."


def test_checks_freeze_at_their_time(tools_client) -> None:
    w = create_world(tools_client, "test_mini")
    w.advance(by="9h")  # past ask.c0's deadline without replying
    _reply(w, "yes, late")
    w.advance(by="1d")
    rep = tools_client.get(f"/worlds/{w.id}/checks").json()
    ask = next(e for e in rep["events"] if e["event_id"] == "ask")
    c0 = ask["checks"][0]
    assert c0["final"] is True and c0["passed"] is False
    assert c0["evaluated_at"].startswith("2025-03-03T16:00")
    # The judge check is declared with its rubric and resolved inputs, for the verifier.
    judge = rep["judge_checks"][0]
    assert judge["rubric"] == "Polite?" and "yes, late" in judge["inputs"][0]["items"][0]["text"]


def test_collateral_damage_is_the_agents_footprint(tools_client) -> None:
    w = create_world(tools_client, "test_mini")
    w.advance(by="2h")
    _reply(w, "yes friday")
    w.advance(by="1d")
    rep = tools_client.get(f"/worlds/{w.id}/checks").json()
    col = next(e for e in rep["events"] if e["event_id"] == "answer")["checks"][0]
    # Events' own deliveries are not blamed on the agent; its reply is an allowed insert.
    assert col["passed"], col
    assert col["detail"]["changes"]["gmail_messages"] == {"insert": 1}
    # Deleting a message the scenario delivered is collateral damage.
    second = w.g("GET", "messages", params={"q": "subject:second"})["messages"][0]["id"]
    w.g("DELETE", f"messages/{second}")
    rep = tools_client.get(f"/worlds/{w.id}/checks").json()
    col = next(e for e in rep["events"] if e["event_id"] == "answer")["checks"][0]
    assert not col["passed"]
    assert {"table": "gmail_messages", "kind": "delete"} in [
        {k: u[k] for k in ("table", "kind")} for u in col["detail"]["unexpected"]
    ]


def test_same_seed_same_actions_same_replay(tools_client) -> None:
    hashes = []
    for _ in range(2):
        w = create_world(tools_client, "test_mini", seed=9)
        w.advance(by="2h")
        _reply(w, "yes friday")
        w.advance(by="2d")
        hashes.append(w.state()["full_hash"])
    assert hashes[0] == hashes[1]


def test_npc_model_endpoint(tmp_path, monkeypatch) -> None:
    """With K3STACK_TOOLS__NPC_MODEL_URL set, the colleague's words come from the model."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            out = json.dumps({"choices": [{"message": {"content": "Model says: Friday works."}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(out.encode())

        def log_message(self, *a) -> None:  # quiet
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    from fastapi.testclient import TestClient

    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("K3STACK_TOOLS__NPC_MODEL_URL", f"http://127.0.0.1:{srv.server_port}/v1")
    get_settings.cache_clear()
    try:
        from services.tools.app import create_app

        with TestClient(create_app()) as c:
            keyed(c)
            w = create_world(c, "test_mini")
            w.advance(by="2h")
            _reply(w, "yes friday")
            w.advance(by="1d")
            text = w.api.body_text(w.api.gmail_by_msgid("<answer@corp.test>"))
            assert "Model says: Friday works." in text
            assert "Great, Friday it is." in seen[0]["messages"][0]["content"]  # the intent
    finally:
        srv.shutdown()
        get_settings.cache_clear()
