"""The scenario DSL: a scenario is a cast, a vocabulary and a list of seeded building blocks.

A :class:`ScenarioSpec` (written in YAML under ``library/``, or built in Python) names its
domain, the words of its world (``vocab``: what is requested, who owns the policy, which
tracker holds the record) and the blocks that make up its week::

    name: finance_expenses
    domain: finance
    vocab: {item: expense claim, ref: EXP, tracker: Expense log, ...}
    blocks:
      - {block: approval, count: 4}
      - {block: lookup, count: 2}
      - {block: meeting}
      - ...

:func:`~services.tools.scenarios.compiler.compile_spec` turns a spec and a seed into a :class:`ScenarioInstance`: each block (see
``blocks/``) adds its events, their checks and the oracle's steps to a :class:`Scene`,
drawing names, amounts, dates and outcomes from the seed. The scene also tracks when each
event happens on the oracle's path, which fixes every event's collateral budget: the agent may
write at most twice as often as the oracle does in that event's window, plus two.

Oracle steps are MCP tool calls (``{"tool": "send_email", "args": {...}}``) whose ids are
symbolic (``{"$msg": Message-ID}``, ``{"$dm": email}``, ``{"$db": title}``, ...) until
``scenarios.oracle`` resolves them in a live world; each also carries its app-level form
(``{"do": "gmail.reply", "msgid": ..., "to": [...], "body": ...}``; kinds gmail.reply, gmail.modify,
gmail.send, slack.dm, slack.post, notion.add_row, notion.update_row, calendar.insert,
calendar.update) for planners that map steps onto their own tool sets.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from services.tools.apps.notion.ops import row_properties
from services.tools.scenarios.generator import Gen
from shared.contracts.tools import (
    Check,
    CheckFallback,
    Domain,
    Effect,
    EventSpec,
    Person,
    ScenarioInstance,
    Trigger,
)

BUDGET_SLACK = 2


class BlockUse(BaseModel):
    block: str = Field(description="A building block of blocks.BLOCKS.")
    count: int = Field(1, ge=1, le=12)
    params: dict[str, Any] = Field(default_factory=dict)


class ScenarioSpec(BaseModel):
    """A scenario as data (YAML or Python): what a generator composes for every seed."""

    name: str
    title: str
    domain: Domain
    description: str
    days: int = Field(6, ge=5, le=30, description="Simulated days from start to end.")
    user_role: str = "Assistant"
    vocab: dict[str, Any] = Field(default_factory=dict)
    blocks: list[BlockUse]

    @classmethod
    def from_yaml(cls, path: Path) -> ScenarioSpec:
        return cls.model_validate(yaml.safe_load(path.read_text()))


def legacy(kind: str, **fields: Any) -> dict[str, Any]:
    """The step's older, app-level form (``{"do": "gmail.reply", "msgid": ...}``), kept beside
    the tool call for planners that build their own tool calls from it."""
    return {"do": kind, **fields}


def pd(p: Person) -> dict[str, Any]:
    return {"name": p.name, "email": p.email}


class Scene:
    """What blocks write into: cast, set-up, events with checks, oracle steps, timing."""

    def __init__(self, spec: ScenarioSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.gen = Gen(seed, spec.name)
        self.start = self.gen.start()
        self.end = self.at(spec.days - 1, 18)
        self.vocab = spec.vocab
        self.user = self.gen.person(spec.user_role)
        self.people: list[Person] = []
        self.channels: dict[str, list[Person]] = {}
        self.databases: dict[str, dict[str, Any]] = {}
        self.old_mail: list[Effect] = []
        self.calendar: list[dict[str, Any]] = []
        self.events: list[EventSpec] = []
        self.oracle: dict[str, list[dict[str, Any]]] = {}
        self.expected: dict[str, datetime | None] = {}
        self.facts: dict[str, Any] = {"refs": {}, "final": {}}
        self._refs: set[str] = set()
        self.canvas: list[Effect] = []  # Canvas courses and coursework, after its set-up

    # --- cast and content ---------------------------------------------------------------

    def word(self, key: str, default: str = "") -> str:
        return str(self.vocab.get(key, default))

    def person(self, role: str, external: bool = False) -> Person:
        dom = f"{self.gen.pick(['partner', 'client', 'vendor'])}-{self.gen.integer(10, 99)}.test"
        p = self.gen.person(role, domain=dom if external else None)
        self.people.append(p)
        return p

    def ref(self) -> str:
        prefix = self.word("ref", "REF")
        while True:
            r = f"{prefix}-{self.gen.integer(1000, 9999)}"
            if r not in self._refs:
                self._refs.add(r)
                return r

    def at(self, day: int, hour: int, minute: int = 0) -> datetime:
        d = self.start.date() + timedelta(days=day)
        return datetime.combine(d, time(hour, minute), tzinfo=self.start.tzinfo)

    def channel(self, name: str, members: list[Person]) -> str:
        have = self.channels.setdefault(name, [])
        have.extend(p for p in members if p not in have)
        return name

    def database(self, title: str, props: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        db = self.databases.setdefault(title, {"title": title, "properties": props, "rows": []})
        db["rows"].extend(rows)

    def msgid(self, tag: str) -> str:
        return self.gen.msgid(tag)

    # --- events ---------------------------------------------------------------------------

    def add(
        self,
        ev_id: str,
        title: str,
        *,
        effects: list[Effect],
        checks: list[Check],
        steps: list[dict[str, Any]] | None = None,
        at: datetime | None = None,
        trigger: Trigger | None = None,
        unless: Trigger | None = None,
        expected: datetime | None,
        depends_on: list[str] | None = None,
        tags: list[str] | None = None,
    ) -> str:
        """One event; ``expected`` is when it happens on the oracle's path (None: averted)."""
        for i, c in enumerate(checks):
            c.id = f"{ev_id}.c{i}"
        self.events.append(
            EventSpec(
                id=ev_id,
                title=title,
                at=at,
                trigger=trigger,
                unless=unless,
                effects=effects,
                checks=checks,
                depends_on=depends_on or [],
                tags=tags or [],
            )
        )
        self.oracle[ev_id] = steps or []
        self.expected[ev_id] = expected
        return ev_id

    # --- effects ------------------------------------------------------------------------------

    @staticmethod
    def mail(sender: Person, subject: str, body: str, msgid: str, **extra: Any) -> Effect:
        args = {"from": pd(sender), "subject": subject, "body": body, "message_id": msgid}
        return Effect(op="gmail.deliver", args=args | extra)

    @staticmethod
    def npc_mail(
        npc: Person,
        body: str,
        msgid: str,
        thread_msgid: str | None,
        script: list[dict[str, Any]] | None = None,
    ) -> Effect:
        args: dict[str, Any] = {
            "persona": pd(npc) | {"role": npc.role},
            "body": body,
            "message_id": msgid,
            "model": True,
        }
        if thread_msgid:
            args["thread_msgid"] = thread_msgid  # else: the thread of the agent's mail
        if script:
            args["script"] = script
        return Effect(op="npc.reply", args=args)

    @staticmethod
    def dm(sender: Person, text: str) -> Effect:
        return Effect(op="slack.dm", args={"from_email": sender.email, "text": text})

    @staticmethod
    def post(channel: str, sender: Person, text: str) -> Effect:
        return Effect(
            op="slack.post", args={"channel": channel, "as_email": sender.email, "text": text}
        )

    # --- checks ---------------------------------------------------------------------------

    @staticmethod
    def check(kind: str, by: datetime | None, description: str, **args: Any) -> Check:
        return Check(id="", kind=kind, args=args, at=by, description=description)

    def judge(self, rubric: str, by: datetime, selector: dict[str, Any], fallback: Check) -> Check:
        return Check(
            id="",
            kind="judge",
            at=by,
            description=fallback.description,
            rubric=rubric,
            inputs=[selector],
            fallback=CheckFallback(kind=fallback.kind, args=fallback.args),
        )

    # --- oracle steps ---------------------------------------------------------------------

    def reply_step(self, parent_msgid: str, to: list[Person], subject: str, body: str) -> dict:
        return {
            "tool": "send_email",
            "args": {
                "to": [p.email for p in to],
                "subject": subject if subject.lower().startswith("re:") else f"Re: {subject}",
                "body": body,
                "inReplyTo": {"$msg": parent_msgid},
            },
            **legacy("gmail.reply", msgid=parent_msgid, to=[p.email for p in to], body=body),
        }

    @staticmethod
    def send_step(to: list[Person], subject: str, body: str) -> dict[str, Any]:
        return {
            "tool": "send_email",
            "args": {"to": [p.email for p in to], "subject": subject, "body": body},
            **legacy("gmail.send", to=[p.email for p in to], subject=subject, body=body),
        }

    @staticmethod
    def dm_step(to: Person, text: str) -> dict[str, Any]:
        return {
            "tool": "slack_post_message",
            "args": {"channel_id": {"$dm": to.email}, "text": text},
            **legacy("slack.dm", email=to.email, text=text),
        }

    @staticmethod
    def channel_step(channel: str, text: str) -> dict[str, Any]:
        return {
            "tool": "slack_post_message",
            "args": {"channel_id": f"#{channel}", "text": text},
            **legacy("slack.post", channel=f"#{channel}", text=text),
        }

    def row_step(self, db: str, values: dict[str, Any]) -> dict[str, Any]:
        props = row_properties(values, self.databases[db]["properties"])
        return {
            "tool": "API-post-page",
            "args": {"parent": {"database_id": {"$db": db}}, "properties": props},
            **legacy("notion.add_row", database=db, properties=props),
        }

    def update_step(self, db: str, title: str, values: dict[str, Any]) -> dict[str, Any]:
        props = row_properties(values, self.databases[db]["properties"])
        return {
            "tool": "API-patch-page",
            "args": {"page_id": {"$page": [db, title]}, "properties": props},
            **legacy(
                "notion.update_row",
                database=db,
                title_property="Name",
                title=title,
                properties=props,
            ),
        }

    # --- compile --------------------------------------------------------------------------

    def _setup(self) -> list[Effect]:
        u = self.user
        handle = u.handle or u.email.split("@")[0]
        insiders = [p for p in self.people if p.email.endswith(self.gen.domain)]
        out = [
            Effect(op="gmail.setup_mailbox", args={"email": u.email, "name": u.name}),
            Effect(
                op="slack.setup",
                args={
                    "team_name": self.gen.company,
                    "agent": {"name": handle, "real_name": u.name, "email": u.email},
                    "users": [
                        {
                            "name": p.handle or p.email.split("@")[0],
                            "real_name": p.name,
                            "email": p.email,
                            "title": p.role,
                        }
                        for p in insiders
                    ],
                    "channels": [
                        {"name": n, "members": [p.email for p in ms]}
                        for n, ms in self.channels.items()
                    ],
                },
            ),
            Effect(op="calendar.setup", args={"email": u.email, "name": u.name}),
            Effect(
                op="notion.setup",
                args={
                    "workspace": self.gen.company,
                    "people": [pd(p) for p in insiders],
                    "page": f"{self.gen.company} team space",
                    "databases": list(self.databases.values()),
                },
            ),
        ]
        if self.canvas:
            out.append(Effect(op="canvas.setup", args={"email": u.email, "name": u.name}))
            out += self.canvas
        out += [Effect(op="calendar.add", args={"event": e}) for e in self.calendar]
        return out + self.old_mail

    def _budgets(self) -> None:
        """Every event gets a budget over the agent's writes in its window."""
        step_times = [
            t
            for ev_id, steps in self.oracle.items()
            for _ in steps
            if (t := self.expected.get(ev_id)) is not None
        ]
        for ev in self.events:
            since = self.expected.get(ev.id) or ev.at
            dated = [c.at for c in ev.checks if c.at is not None]
            if since is None or not dated:
                continue
            until = max(dated)
            n = sum(1 for t in step_times if since <= t <= until)
            ev.checks.append(
                Check(
                    id=f"{ev.id}.c{len(ev.checks)}",
                    kind="world.budget",
                    at=until,
                    description="collateral budget: few writes while this event is open",
                    args={
                        "since": since.isoformat(),
                        "until": until.isoformat(),
                        "max": 2 * n + BUDGET_SLACK,
                    },
                )
            )

    def instance(self) -> ScenarioInstance:
        self._budgets()
        return ScenarioInstance(
            name=self.spec.name,
            seed=self.seed,
            title=self.spec.title,
            domain=self.spec.domain,
            description=self.spec.description,
            start=self.start,
            end=self.end,
            user=self.user,
            people=self.people,
            setup=self._setup(),
            events=self.events,
            facts=self.facts,
            oracle=self.oracle,
        )
