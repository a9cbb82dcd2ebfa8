"""Management routes for worlds (behind the service API key): lifecycle, state, clock,
events and checks; plus the scenario catalogue."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ConfigDict, field_validator
from sqlalchemy import select

from services.tools.context import WorldRoute, _aware, rejects
from services.tools.events import engine
from services.tools.models import EventRow, SnapshotRow, WorldRow
from services.tools.scenarios import SCENARIOS, cache, get_scenario
from services.tools.scenarios.base import Scenario
from services.tools.worlds import service
from shared.auth import require_admin_key
from shared.contracts.tools import (
    MAX_ADVANCE,
    AdvanceBody,
    AdvanceResult,
    ChecksReport,
    Clock,
    EventInfo,
    EventList,
    OraclePlan,
    RestoreBody,
    ScenarioInstance,
    ScenarioList,
    ScenarioSummary,
    Snapshot,
    SnapshotCreate,
    World,
    WorldState,
    parse_duration,
)
from shared.contracts.tools import (
    WorldCreate as WorldCreateContract,
)
from shared.db import ServiceDatabase
from shared.errors import APIError, bad_request

# WorldRoute: a clock advance or snapshot never races the same world's app calls. Every route
# here wants the admin key in every mode: worlds hold the answers (oracle plans, checks, the
# clock), and a world's agent token opens only that world's apps and MCP endpoint.
router = APIRouter(
    tags=["worlds"], route_class=WorldRoute, dependencies=[Depends(require_admin_key("tools"))]
)


def _db(request: Request) -> ServiceDatabase:
    return request.app.state.db


def _objects(request: Request):  # type: ignore[no-untyped-def]
    return getattr(request.app.state, "objects", None)


def _npc_url(request: Request) -> str | None:
    return request.app.state.settings.tools.npc_model_url


def _world_out(row: WorldRow, token: str | None = None) -> World:
    return World(
        id=row.id,
        scenario=row.scenario,
        seed=row.seed,
        created_at=_aware(row.created_at),
        clock=_aware(row.clock),
        parent_id=row.parent_id,
        token=token,
    )


def _snap_out(s: SnapshotRow) -> Snapshot:
    return Snapshot(
        id=s.id,
        world_id=s.origin_world,
        created_at=_aware(s.created_at),
        clock=_aware(s.clock),
        label=s.label,
        state_hash=s.state_hash,
        size=s.size,
    )


class WorldCreate(WorldCreateContract):
    # The contract's body, strictly typed: a ``seed`` of ``false`` or ``"3"`` is a 400, not
    # seed 0 or 3 (the document says integer).
    model_config = ConfigDict(strict=True)

    @field_validator("seed", mode="before")
    @classmethod
    def _integral(cls, value: object) -> object:
        """``3.0`` is an integer in JSON Schema (the document's dialect): seed 3. ``3.5`` is
        still a 400."""
        if type(value) is float and value.is_integer():
            return int(value)
        return value


@router.post("/worlds", response_model=World, status_code=201, operation_id="createWorld")
def create_world(body: WorldCreate, request: Request) -> World:
    """A new world for ``scenario`` and ``seed``, with its own token (shown only here)."""
    with _db(request).session() as s:
        row, token = service.create_world(
            s, body.scenario, body.seed, _npc_url(request), _objects(request)
        )
        return _world_out(row, token)


@router.get("/worlds", response_model=list[World], operation_id="listWorlds")
def list_worlds(request: Request, limit: int = Query(100, ge=1, le=1000)) -> list[World]:
    with _db(request).session() as s:
        rows = s.scalars(select(WorldRow).order_by(WorldRow.created_at.desc()).limit(limit))
        return [_world_out(r) for r in rows]


@router.get("/worlds/{world_id}", response_model=World, operation_id="getWorld")
def get_world(world_id: str, request: Request) -> World:
    with _db(request).session() as s:
        return _world_out(service.get_world(s, world_id))


@router.delete("/worlds/{world_id}", status_code=204, operation_id="deleteWorld")
def delete_world(world_id: str, request: Request) -> Response:
    with _db(request).session() as s:
        service.delete_world(s, world_id)
    return Response(status_code=204)


@router.post("/worlds/{world_id}/reset", response_model=World, operation_id="resetWorld")
def reset_world(world_id: str, request: Request) -> World:
    """Back to the state the world had when it was created (token unchanged)."""
    with _db(request).session() as s:
        return _world_out(service.reset_world(s, world_id, _objects(request)))


@router.post(
    "/worlds/{world_id}/snapshots",
    response_model=Snapshot,
    status_code=201,
    operation_id="createSnapshot",
)
def create_snapshot(
    world_id: str, request: Request, body: SnapshotCreate | None = None
) -> Snapshot:
    with _db(request).session() as s:
        return _snap_out(
            service.snapshot_world(
                s, world_id, body.label if body else None, objects=_objects(request)
            )
        )


@router.get(
    "/worlds/{world_id}/snapshots", response_model=list[Snapshot], operation_id="listSnapshots"
)
def list_snapshots(world_id: str, request: Request) -> list[Snapshot]:
    with _db(request).session() as s:
        service.get_world(s, world_id)
        rows = s.scalars(
            select(SnapshotRow)
            .where(SnapshotRow.origin_world == world_id)
            .order_by(SnapshotRow.created_at)
        )
        return [_snap_out(r) for r in rows]


@router.post("/worlds/{world_id}/restore", response_model=World, operation_id="restoreWorld")
def restore_world(world_id: str, body: RestoreBody, request: Request) -> World:
    with _db(request).session() as s:
        return _world_out(service.restore_world(s, world_id, body.snapshot_id, _objects(request)))


@router.post(
    "/worlds/{world_id}/fork", response_model=World, status_code=201, operation_id="forkWorld"
)
def fork_world(world_id: str, request: Request) -> World:
    """A new world with identical state and its own token; the original goes on unchanged."""
    with _db(request).session() as s:
        row, token = service.fork_world(s, world_id)
        return _world_out(row, token)


@router.get(
    "/worlds/{world_id}/state",
    response_model=WorldState,
    response_model_exclude_unset=True,  # no "tables" key when asked without them
    operation_id="getWorldState",
)
def world_state(
    world_id: str,
    request: Request,
    tables: bool = Query(True, description="Include raw rows per table."),
) -> WorldState:
    """The world's state for verifiers: per-app exports, raw rows, ``state_hash`` (app rows)
    and ``full_hash`` (everything, clock and pending events included)."""
    with _db(request).session() as s:
        return WorldState.model_validate(service.export_state(s, world_id, include_tables=tables))


@router.get("/worlds/{world_id}/clock", response_model=Clock, operation_id="getClock")
def get_clock(world_id: str, request: Request) -> Clock:
    with _db(request).session() as s:
        return Clock(world_id=world_id, now=_aware(service.get_world(s, world_id).clock))


@router.post(
    "/worlds/{world_id}/clock/advance",
    response_model=AdvanceResult,
    operation_id="advanceClock",
    responses=rejects(
        "not exactly one of `to` and `by`, a `by` that is no duration, or a `to` before the "
        "clock (time only moves forward)"
    ),
)
def advance_clock(world_id: str, body: AdvanceBody, request: Request) -> AdvanceResult:
    """Move simulated time forward, firing every due event in order (see events.engine)."""
    with _db(request).session() as s:
        world = service.get_world(s, world_id)
        now = _aware(world.clock)
        if body.to is not None:
            target = _aware(body.to)
            if target < now:
                raise bad_request(
                    f"'to' ({target.isoformat()}) is before the clock "
                    f"({now.isoformat()}); time only moves forward"
                )
        else:
            target = now + parse_duration(body.by)  # type: ignore[arg-type]
        if target - now > MAX_ADVANCE:
            raise bad_request("advance at most 3660 days at a time")
        out = engine.advance(s, world, target, _npc_url(request))
        return AdvanceResult(
            world_id=world_id,
            now=out["clock"],
            fired=out["fired"],
            checks_evaluated=out["checks_evaluated"],
        )


@router.get("/worlds/{world_id}/events", response_model=EventList, operation_id="listEvents")
def list_events(world_id: str, request: Request) -> EventList:
    with _db(request).session() as s:
        service.get_world(s, world_id)
        rows = s.scalars(
            select(EventRow).where(EventRow.world_id == world_id).order_by(EventRow.seq)
        )
        return EventList(
            events=[
                EventInfo(
                    event_id=r.event_id,
                    title=r.spec.get("title"),
                    status=r.status,
                    due_at=_aware(r.due_at) if r.due_at else None,
                    fired_at=_aware(r.fired_at) if r.fired_at else None,
                    trigger=r.spec.get("trigger"),
                    error=r.spec.get("error"),
                )
                for r in rows
            ]
        )


@router.get("/worlds/{world_id}/checks", response_model=ChecksReport, operation_id="getChecks")
def get_checks(world_id: str, request: Request) -> ChecksReport:
    """Each event's verdict (deterministic checks) and the model-judged checks, with their
    rubric and resolved inputs, for the verifier."""
    with _db(request).session() as s:
        world = service.get_world(s, world_id)
        out = ChecksReport.model_validate(engine.report(s, world))
        s.rollback()  # evaluation only reads; never let it write
        return out


@router.get("/scenarios", response_model=ScenarioList, operation_id="listScenarios")
def list_scenarios() -> ScenarioList:
    return ScenarioList(
        scenarios=[
            ScenarioSummary(
                name=sc.name, title=sc.title, domain=sc.domain, description=sc.description
            )
            for sc in SCENARIOS.values()
        ]
    )


@router.get("/scenarios/{name}", response_model=ScenarioInstance, operation_id="getScenario")
def scenario_instance(name: str, seed: int = Query(0, ge=0, le=2**31 - 1)) -> ScenarioInstance:
    """The scenario made concrete for ``seed``: setup, events, checks (what a world runs);
    built once per (scenario, seed)."""
    sc = _scenario(name)
    return cache.pages.get((name, id(sc), seed), lambda: sc.build(seed))


def _scenario(name: str) -> Scenario:
    try:
        return get_scenario(name)
    except KeyError as exc:
        raise APIError(404, "unknown_scenario", str(exc.args[0])) from None


@router.get("/scenarios/{name}/oracle", response_model=OraclePlan, operation_id="getOraclePlan")
def oracle_plan(
    name: str, request: Request, seed: int = Query(0, ge=0, le=2**31 - 1)
) -> OraclePlan:
    """The scenario's oracle as MCP tool calls at simulated times, for ``seed``: replayed in
    order against a fresh world of this scenario and seed (advancing the clock to each
    step's ``at``, then to ``end``), it passes every event. Computed once per (scenario,
    seed) by running the oracle in a scratch world, which is deleted afterwards; this runs
    in a worker thread and holds no lock another request waits on."""
    sc = _scenario(name)
    db = _db(request)

    def compute() -> OraclePlan:
        from services.tools.scenarios.drive import LocalDriver
        from services.tools.scenarios.oracle import run_oracle

        inst = sc.build(seed)
        driver = LocalDriver.create(db, name, seed)
        try:
            steps = run_oracle(driver, inst)
        finally:
            with db.session() as s:
                service.delete_world(s, driver.world_id)
        return OraclePlan(scenario=name, seed=seed, end=inst.end, steps=steps)

    return cache.plans.get((name, id(sc), seed), compute)
