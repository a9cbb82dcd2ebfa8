"""The event engine: install a scenario's events in a world, advance its clock, judge it.

Advancing the clock is a loop over simulated time, deterministic for a seed:

1. read the action log past the last scan; an action that matches a waiting event's trigger
   makes it due (at the action's time + delay, or next morning), and one that matches a due
   event's ``unless`` before its time averts it;
2. take the earliest due event (ties by declaration order) at or before the target time;
   before it, evaluate every check declared for a time up to it, and freeze the verdicts;
3. set the clock to the event's time and run its effects (as actor ``event:<id>``), then
   re-mark the rows it changed (so collateral checks never blame the agent for them); the
   events waiting on this one (``trigger.after_event``) become due;
4. repeat until nothing is due before the target; evaluate the remaining checks due by then;
   the clock ends at the target.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, time, timedelta
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.tools.context import WorldContext, _aware
from services.tools.events.log import event_seq
from services.tools.events.marks import WriteTracker
from services.tools.events.registry import EffectEnv, get_effect, get_predicate
from services.tools.events.spec import Check, EventSpec, ScenarioInstance, Trigger
from services.tools.models import ActionRow, CheckResultRow, EventRow, WorldRow

log = logging.getLogger("k3stack.tools.events")
MAX_EVENTS_PER_ADVANCE = 10_000


def run_effects(ctx: WorldContext, effects: list[dict[str, Any]], env: EffectEnv) -> None:
    for eff in effects:
        get_effect(eff["op"])(ctx, eff.get("args", {}), env)


def install(session: Session, world: WorldRow, inst: ScenarioInstance) -> None:
    """Insert the scenario's events (scheduled ones due at their time, triggered ones waiting)."""
    for seq, ev in enumerate(inst.events):
        session.add(
            EventRow(
                world_id=world.id,
                event_id=ev.id,
                seq=seq,
                status="due" if ev.at is not None else "waiting",
                due_at=ev.at,
                spec=ev.model_dump(mode="json"),
            )
        )
    session.flush()


def _trigger(raw: dict[str, Any]) -> Trigger:
    """A trigger from its JSON (parsed once: specs repeat across every scan)."""
    key = json.dumps(raw, sort_keys=True)
    found = _TRIGGERS.get(key)
    if found is None:
        found = _TRIGGERS[key] = Trigger.model_validate(raw)
        if len(_TRIGGERS) > 50_000:
            _TRIGGERS.clear()
    return found


_TRIGGERS: dict[str, Trigger] = {}


def _matches(trigger: Trigger, action: ActionRow) -> bool:
    if trigger.after_event is not None:
        return False
    if action.app != trigger.app or action.action != trigger.action:
        return False
    if not fnmatchcase(action.actor, trigger.actor):
        return False
    if trigger.text_contains:
        text = (
            f"{(action.payload or {}).get('subject', '')}\n{(action.payload or {}).get('text', '')}"
        )
        if not all(w.lower() in text.lower() for w in trigger.text_contains):
            return False
    for key, want in trigger.where.items():
        have = (action.payload or {}).get(key)
        wants = want if isinstance(want, list) else [want]
        haves = have if isinstance(have, list) else [have]
        norm = {str(h).lower() for h in haves if h is not None}
        if not all(str(w).lower() in norm for w in wants):
            return False
    return True


def _after_since(session: Session, world: WorldRow, trigger: Trigger, action: ActionRow) -> bool:
    if trigger.since_event is None:
        return True
    seq = event_seq(session, world.id, trigger.since_event)
    return seq is not None and action.seq > seq


def _due_time(trigger: Trigger, at: datetime) -> datetime:
    at = _aware(at)
    if trigger.next_morning:
        hh, mm = (int(x) for x in trigger.next_morning.split(":"))
        return datetime.combine(at.date() + timedelta(days=1), time(hh, mm), tzinfo=at.tzinfo)
    return at + timedelta(minutes=trigger.delay_minutes)


def _scan_triggers(session: Session, world: WorldRow) -> None:
    actions = list(
        session.scalars(
            select(ActionRow)
            .where(ActionRow.world_id == world.id, ActionRow.seq > (world.actions_scanned or 0))
            .order_by(ActionRow.seq)
        )
    )
    if not actions:
        return
    pending = list(
        session.scalars(
            select(EventRow)
            .where(EventRow.world_id == world.id, EventRow.status.in_(("waiting", "due")))
            .order_by(EventRow.seq)
        )
    )
    for action in actions:
        for ev in pending:
            if ev.status == "waiting":
                trig = ev.spec.get("trigger")
                if (
                    trig
                    and _matches(t := _trigger(trig), action)
                    and _after_since(session, world, t, action)
                ):
                    ev.status = "due"
                    ev.due_at = _due_time(Trigger.model_validate(trig), action.at)
                    ev.trigger_seq = action.seq
            elif ev.status == "due" and ev.spec.get("unless") and ev.due_at is not None:
                unless = _trigger(ev.spec["unless"])
                if (
                    _aware(action.at) <= _aware(ev.due_at)
                    and _matches(unless, action)
                    and _after_since(session, world, unless, action)
                ):
                    ev.status = "averted"
                    ev.trigger_seq = action.seq
    world.actions_scanned = actions[-1].seq
    session.flush()


def _arm_followers(session: Session, world: WorldRow, fired: EventRow) -> None:
    """Events waiting on ``fired`` (``trigger.after_event``) become due."""
    for ev in session.scalars(
        select(EventRow).where(EventRow.world_id == world.id, EventRow.status == "waiting")
    ):
        trig = ev.spec.get("trigger") or {}
        if trig.get("after_event") == fired.event_id:
            ev.status = "due"
            ev.due_at = _due_time(Trigger.model_validate(trig), world.clock)


def _timed_checks(session: Session, world_id: str) -> list[tuple[datetime, int, int, str, Check]]:
    """Every check with a time, in evaluation order; parsed once per session (a world's
    events and their checks never change after install)."""
    key = ("engine.timed_checks", world_id)
    if key not in session.info:
        out = []
        for ev in session.scalars(select(EventRow).where(EventRow.world_id == world_id)):
            for i, raw in enumerate(ev.spec.get("checks", [])):
                chk = Check.model_validate(raw)
                if (chk.kind == "judge" and chk.fallback is None) or chk.at is None:
                    continue
                out.append((_aware(chk.at), ev.seq, i, ev.event_id, chk))
        out.sort(key=lambda t: (t[0], t[1], t[2]))
        session.info[key] = out
    return session.info[key]


def _pending_checks(
    session: Session, world_id: str, until: datetime | None
) -> list[tuple[datetime, int, int, str, Check]]:
    done = set(
        session.scalars(select(CheckResultRow.check_id).where(CheckResultRow.world_id == world_id))
    )
    return [
        t
        for t in _timed_checks(session, world_id)
        if t[4].id not in done and (until is None or t[0] <= until)
    ]


def evaluate_check(ctx: WorldContext, chk: Check) -> tuple[bool, dict[str, Any]]:
    """Run the check's predicate (a judge check runs its deterministic fallback)."""
    kind, args = chk.kind, chk.args
    if chk.kind == "judge" and chk.fallback is not None:
        kind, args = chk.fallback.kind, chk.fallback.args
    try:
        outcome = get_predicate(kind)(ctx, args)
    except Exception as exc:  # noqa: BLE001 - a broken check fails, it never breaks the world
        log.exception("check %s raised", chk.id)
        return False, {"error": f"{type(exc).__name__}: {exc}"}
    detail = dict(outcome.detail)
    if chk.kind == "judge":
        detail["judged_by"] = "fallback"
    return outcome.passed, detail


def _freeze_checks(session: Session, world: WorldRow, until: datetime) -> int:
    n = 0
    for at, _, _, event_id, chk in _pending_checks(session, world.id, until):
        ctx = WorldContext(
            world_id=world.id, session=session, seed=world.seed, world=world, actor="checker"
        )
        passed, detail = evaluate_check(ctx, chk)
        session.add(
            CheckResultRow(
                world_id=world.id,
                check_id=chk.id,
                event_id=event_id,
                evaluated_at=at,
                passed=passed,
                detail=detail,
            )
        )
        n += 1
    session.flush()
    return n


def fire(session: Session, world: WorldRow, ev: EventRow, npc_model_url: str | None) -> None:
    spec = EventSpec.model_validate(ev.spec)
    trigger_payload = None
    if ev.trigger_seq is not None:
        action = session.get(ActionRow, (world.id, ev.trigger_seq))
        trigger_payload = action.payload if action is not None else None
    ctx = WorldContext(
        world_id=world.id,
        session=session,
        seed=world.seed,
        world=world,
        actor=f"event:{ev.event_id}",
    )
    env = EffectEnv(event_id=ev.event_id, trigger=trigger_payload, npc_model_url=npc_model_url)
    tracker = WriteTracker(session)
    try:
        with tracker:
            run_effects(ctx, [e.model_dump() for e in spec.effects], env)
        ev.status = "fired"
    except Exception as exc:  # noqa: BLE001 - a broken event is reported, the world goes on
        log.exception("event %s failed", ev.event_id)
        session.flush()
        ev.status = "failed"
        ev.spec = ev.spec | {"error": f"{type(exc).__name__}: {exc}"}
    ev.fired_at = world.clock
    session.flush()
    tracker.remark(world.id)
    _arm_followers(session, world, ev)


def tick(session: Session, world: WorldRow) -> None:
    """Let apps act on the new time (e.g. Slack posts scheduled messages): each app's
    ``tick(ctx)`` runs as the agent, who scheduled it."""
    from services.tools.db import tools_apps

    ctx = WorldContext(world_id=world.id, session=session, seed=world.seed, world=world)
    for app in tools_apps():
        app.tick(ctx)
    session.flush()


def advance(
    session: Session, world: WorldRow, target: datetime, npc_model_url: str | None = None
) -> dict[str, Any]:
    """Move the world's clock to ``target``, firing due events and freezing due checks."""
    target = _aware(target)
    fired: list[str] = []
    checks = 0
    for _ in range(MAX_EVENTS_PER_ADVANCE):
        _scan_triggers(session, world)
        nxt = session.scalar(
            select(EventRow)
            .where(
                EventRow.world_id == world.id, EventRow.status == "due", EventRow.due_at <= target
            )
            .order_by(EventRow.due_at, EventRow.seq)
            .limit(1)
        )
        if nxt is None:
            break
        when = max(_aware(nxt.due_at), _aware(world.clock))  # type: ignore[arg-type]
        checks += _freeze_checks(session, world, when)
        world.clock = when
        tick(session, world)
        fire(session, world, nxt, npc_model_url)
        fired.append(nxt.event_id)
    _scan_triggers(session, world)
    checks += _freeze_checks(session, world, target)
    world.clock = target
    tick(session, world)
    session.flush()
    return {"clock": target, "fired": fired, "checks_evaluated": checks}


def report(session: Session, world: WorldRow) -> dict[str, Any]:
    """Every event's verdict: frozen results for checks whose time has come, live evaluation
    for the others (so an episode that ends early is judged on what it did). An event passes
    when it fired and all its deterministic checks pass; judge checks are listed for the
    verifier with their resolved inputs."""
    from services.tools.events.judge import resolve_inputs

    frozen = {
        r.check_id: r
        for r in session.scalars(select(CheckResultRow).where(CheckResultRow.world_id == world.id))
    }
    ctx = WorldContext(
        world_id=world.id, session=session, seed=world.seed, world=world, actor="checker"
    )
    events = []
    judges = []
    for ev in session.scalars(
        select(EventRow).where(EventRow.world_id == world.id).order_by(EventRow.seq)
    ):
        spec = EventSpec.model_validate(ev.spec)
        results = []
        for chk in spec.checks:
            if chk.kind == "judge":
                judges.append(
                    {
                        "event_id": ev.event_id,
                        "check_id": chk.id,
                        "rubric": chk.rubric,
                        "description": chk.description,
                        "inputs": resolve_inputs(ctx, chk.inputs),
                    }
                )
                if chk.fallback is None:
                    continue
            if chk.id in frozen:
                r = frozen[chk.id]
                results.append(
                    {
                        "id": chk.id,
                        "kind": chk.kind,
                        "passed": r.passed,
                        "final": True,
                        "evaluated_at": _aware(r.evaluated_at),
                        "description": chk.description,
                        "detail": r.detail,
                    }
                )
            else:
                passed, detail = evaluate_check(ctx, chk)
                results.append(
                    {
                        "id": chk.id,
                        "kind": chk.kind,
                        "passed": passed,
                        "final": False,
                        "evaluated_at": ctx.now,
                        "description": chk.description,
                        "detail": detail,
                    }
                )
        # An averted event (the agent prevented it, e.g. answered before the escalation) is
        # judged by its checks like one that fired.
        fired = ev.status in ("fired", "averted")
        events.append(
            {
                "event_id": ev.event_id,
                "title": spec.title,
                "status": ev.status,
                "due_at": _aware(ev.due_at) if ev.due_at else None,
                "passed": fired and bool(results) and all(r["passed"] for r in results),
                "checks": results,
            }
        )
    n_checks = sum(len(e["checks"]) for e in events)
    return {
        "world_id": world.id,
        "clock": _aware(world.clock),
        "events_total": len(events),
        "events_passed": sum(e["passed"] for e in events),
        "checks_total": n_checks,
        "checks_passed": sum(r["passed"] for e in events for r in e["checks"]),
        "events": events,
        "judge_checks": judges,
    }
