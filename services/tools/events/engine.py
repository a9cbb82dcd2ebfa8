"""The event engine: install a scenario's events in a world, advance its clock, judge it.

Advancing the clock is a loop over simulated time, deterministic for a seed:

1. read the action log past the last scan; an action that matches a waiting event's trigger
   makes it due (at the action's time + delay, or next morning);
2. take the earliest due event (ties by declaration order) at or before the target time;
   before it, evaluate every check declared for a time up to it, and freeze the verdicts;
3. set the clock to the event's time and run its effects (as actor ``event:<id>``), then
   re-mark the rows it changed (so collateral checks never blame the agent for them);
4. repeat until nothing is due before the target; evaluate the remaining checks due by then;
   the clock ends at the target.
"""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.tools.context import WorldContext, _aware
from services.tools.events.marks import remark
from services.tools.events.registry import EffectEnv, get_effect, get_predicate
from services.tools.events.spec import Check, EventSpec, ScenarioInstance, Trigger
from services.tools.models import ActionRow, CheckResultRow, EventRow, WorldRow
from services.tools.worlds.store import row_digests

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


def _matches(trigger: Trigger, action: ActionRow) -> bool:
    if action.app != trigger.app or action.action != trigger.action:
        return False
    if trigger.actor != "*" and action.actor != trigger.actor:
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
    waiting = list(
        session.scalars(
            select(EventRow)
            .where(EventRow.world_id == world.id, EventRow.status == "waiting")
            .order_by(EventRow.seq)
        )
    )
    for action in actions:
        for ev in waiting:
            if ev.status != "waiting":
                continue
            trig = ev.spec.get("trigger")
            if trig and _matches(Trigger.model_validate(trig), action):
                ev.status = "due"
                ev.due_at = _due_time(Trigger.model_validate(trig), action.at)
                ev.trigger_seq = action.seq
    world.actions_scanned = actions[-1].seq
    session.flush()


def _pending_checks(
    session: Session, world_id: str, until: datetime | None
) -> list[tuple[datetime, int, int, str, Check]]:
    done = set(
        session.scalars(select(CheckResultRow.check_id).where(CheckResultRow.world_id == world_id))
    )
    out = []
    for ev in session.scalars(select(EventRow).where(EventRow.world_id == world_id)):
        for i, raw in enumerate(ev.spec.get("checks", [])):
            chk = Check.model_validate(raw)
            if chk.kind == "judge" or chk.at is None or chk.id in done:
                continue
            at = _aware(chk.at)
            if until is None or at <= until:
                out.append((at, ev.seq, i, ev.event_id, chk))
    out.sort(key=lambda t: (t[0], t[1], t[2]))
    return out


def evaluate_check(ctx: WorldContext, chk: Check) -> tuple[bool, dict[str, Any]]:
    try:
        outcome = get_predicate(chk.kind)(ctx, chk.args)
    except Exception as exc:  # noqa: BLE001 - a broken check fails, it never breaks the world
        log.exception("check %s raised", chk.id)
        return False, {"error": f"{type(exc).__name__}: {exc}"}
    return outcome.passed, outcome.detail


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
    before = row_digests(session, world.id)
    try:
        run_effects(ctx, [e.model_dump() for e in spec.effects], env)
        ev.status = "fired"
    except Exception as exc:  # noqa: BLE001 - a broken event is reported, the world goes on
        log.exception("event %s failed", ev.event_id)
        ev.status = "failed"
        ev.spec = ev.spec | {"error": f"{type(exc).__name__}: {exc}"}
    ev.fired_at = world.clock
    session.flush()
    remark(session, world.id, before, row_digests(session, world.id))


def tick(session: Session, world: WorldRow) -> None:
    """Let apps act on the new time (e.g. Slack posts scheduled messages): each app's
    ``actions.tick(ctx)`` (or Slack's ``deliver_due``) runs as the agent, who scheduled it."""
    from services.tools.db import app_module, load_apps

    ctx = WorldContext(world_id=world.id, session=session, seed=world.seed, world=world)
    for app in load_apps():
        mod = app_module(app, "actions")
        fn = getattr(mod, "tick", None) or getattr(mod, "deliver_due", None)
        if fn is not None:
            fn(ctx)
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
        fired = ev.status == "fired"
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
