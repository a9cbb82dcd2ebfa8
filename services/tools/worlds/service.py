"""World lifecycle over a session: create, reset, snapshot, restore, fork, delete, export.

Every operation is generic over the world-scoped tables (``worlds.store``); the scenario
library is consulted only at creation. A world's initial state is itself a snapshot, so
``reset`` is ``restore(initial)``.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from services.tools.context import WorldContext, _aware, token_digest
from services.tools.db import tools_apps
from services.tools.events import engine
from services.tools.events.marks import mark_all
from services.tools.models import SnapshotRow, WorldRow
from services.tools.scenarios import get_scenario
from services.tools.serial import lock_world
from services.tools.worlds import store
from shared.errors import APIError, not_found
from shared.objectstore import ObjectStore

# Snapshots up to this size (compressed) stay in SQL; larger ones go to the object store.
SNAPSHOT_INLINE_MAX = 256 * 1024
SNAPSHOT_PREFIX = "tools/snapshots/"


def _wall() -> datetime:
    return datetime.now(UTC)


def new_token() -> str:
    return "wt_" + secrets.token_urlsafe(24)


def get_world(session: Session, world_id: str) -> WorldRow:
    """The world's row, its database lock held for the rest of the transaction
    (:func:`services.tools.serial.lock_world`)."""
    lock_world(session, world_id)
    world = session.get(WorldRow, world_id)
    if world is None:
        raise not_found("world", world_id)
    return world


def create_world(
    session: Session,
    scenario: str,
    seed: int,
    npc_model_url: str | None = None,
    objects: ObjectStore | None = None,
) -> tuple[WorldRow, str]:
    """Build ``scenario`` for ``seed``: run its setup, install its events, mark the rows, and
    keep that state as the world's initial snapshot."""
    try:
        spec = get_scenario(scenario)
    except KeyError as exc:
        raise APIError(404, "unknown_scenario", str(exc.args[0])) from None
    inst = spec.build(seed)
    token = new_token()
    world = WorldRow(
        id=uuid.uuid4().hex,
        scenario=scenario,
        seed=seed,
        created_at=_wall(),
        token_sha256=token_digest(token),
        clock=inst.start,
        id_counter=0,
        actions_scanned=0,
    )
    session.add(world)
    session.flush()
    ctx = WorldContext(world_id=world.id, session=session, seed=seed, world=world, actor="setup")
    engine.run_effects(
        ctx,
        [e.model_dump() for e in inst.setup],
        engine.EffectEnv(event_id="setup", npc_model_url=npc_model_url),
    )
    for app in tools_apps():  # apps the scenario left alone still exist (reads never write)
        app.ensure_setup(ctx)
    engine.install(session, world, inst)
    engine._scan_triggers(session, world)  # setup's own actions never trigger events
    mark_all(session, world.id)
    snap = snapshot_world(session, world.id, label="initial", objects=objects)
    world.initial_snapshot_id = snap.id
    session.flush()
    return world, token


def _world_fields(world: WorldRow) -> dict[str, Any]:
    return {
        "scenario": world.scenario,
        "seed": world.seed,
        "clock": store.encode_value(_aware(world.clock)),
        "id_counter": world.id_counter,
        "actions_scanned": world.actions_scanned,
    }


def snapshot_world(
    session: Session,
    world_id: str,
    label: str | None = None,
    objects: ObjectStore | None = None,
    inline_max: int | None = None,
) -> SnapshotRow:
    world = get_world(session, world_id)
    tables = store.dump_world(session, world_id)
    fields = _world_fields(world)
    hashes = store.state_hashes(tables, fields["clock"])
    data = store.pack({"format": store.SNAPSHOT_FORMAT, "world": fields, "tables": tables})
    limit = SNAPSHOT_INLINE_MAX if inline_max is None else inline_max
    key = None
    if objects is not None and len(data) > limit:
        key = objects.put_content_addressed(data, prefix=SNAPSHOT_PREFIX)
    snap = SnapshotRow(
        id="snap_" + uuid.uuid4().hex[:20],
        origin_world=world_id,
        created_at=_wall(),
        clock=world.clock,
        label=label,
        state_hash=hashes["full_hash"],
        size=len(data),
        data=None if key else data,
        object_key=key,
    )
    session.add(snap)
    session.flush()
    return snap


def get_snapshot(session: Session, snapshot_id: str) -> SnapshotRow:
    snap = session.get(SnapshotRow, snapshot_id)
    if snap is None:
        raise not_found("snapshot", snapshot_id)
    return snap


def snapshot_bytes(snap: SnapshotRow, objects: ObjectStore | None) -> bytes:
    if snap.data is not None:
        return snap.data
    if objects is None or not snap.object_key:
        raise APIError(
            409,
            "snapshot_unavailable",
            f"snapshot {snap.id!r} lives in the object store, which is not configured",
        )
    try:
        return objects.get(snap.object_key)
    except KeyError:
        raise APIError(
            409, "snapshot_unavailable", f"snapshot {snap.id!r}: object {snap.object_key!r} is gone"
        ) from None


def restore_world(
    session: Session, world_id: str, snapshot_id: str, objects: ObjectStore | None = None
) -> WorldRow:
    """Replace the world's whole state with the snapshot's (any world's snapshot may be
    restored into any world: the rows are rewritten to this world's id)."""
    world = get_world(session, world_id)
    snap = get_snapshot(session, snapshot_id)
    payload = store.unpack(snapshot_bytes(snap, objects))
    if payload.get("format") != store.SNAPSHOT_FORMAT:
        raise APIError(
            409,
            "snapshot_format",
            f"snapshot format {payload.get('format')} is not {store.SNAPSHOT_FORMAT}",
        )
    store.clear_world(session, world_id)
    try:
        store.load_rows(session, world_id, payload["tables"])
    except ValueError as exc:
        raise APIError(409, "snapshot_incompatible", str(exc)) from None
    fields = payload["world"]
    world.scenario = fields["scenario"]
    world.seed = fields["seed"]
    world.clock = datetime.fromisoformat(fields["clock"])
    world.id_counter = fields["id_counter"]
    world.actions_scanned = fields["actions_scanned"]
    session.flush()
    session.expire_all()
    return world


def reset_world(session: Session, world_id: str, objects: ObjectStore | None = None) -> WorldRow:
    world = get_world(session, world_id)
    if not world.initial_snapshot_id:
        raise APIError(409, "no_initial_state", f"world {world_id!r} has no initial snapshot")
    return restore_world(session, world_id, world.initial_snapshot_id, objects)


def fork_world(session: Session, world_id: str) -> tuple[WorldRow, str]:
    """A new world with identical state (same ids, clock, pending events); its own token."""
    src = get_world(session, world_id)
    session.flush()
    token = new_token()
    child = WorldRow(
        id=uuid.uuid4().hex,
        scenario=src.scenario,
        seed=src.seed,
        created_at=_wall(),
        token_sha256=token_digest(token),
        clock=src.clock,
        id_counter=src.id_counter,
        actions_scanned=src.actions_scanned,
        initial_snapshot_id=src.initial_snapshot_id,
        parent_id=src.id,
    )
    session.add(child)
    session.flush()
    store.copy_world(session, world_id, child.id)
    session.flush()
    return child, token


def delete_world(session: Session, world_id: str) -> None:
    world = get_world(session, world_id)
    store.clear_world(session, world_id)
    # Snapshots are kept while a fork still resets to them. Objects in the store are
    # content-addressed and may be shared by other worlds' snapshots, so they stay.
    in_use = set(
        session.scalars(
            select(WorldRow.initial_snapshot_id).where(
                WorldRow.id != world_id, WorldRow.initial_snapshot_id.is_not(None)
            )
        )
    )
    session.execute(
        delete(SnapshotRow).where(
            SnapshotRow.origin_world == world_id, SnapshotRow.id.not_in(in_use)
        )
    )
    session.delete(world)
    session.flush()


def export_state(session: Session, world_id: str, include_tables: bool = True) -> dict[str, Any]:
    """What a verifier diffs: each app's own export, the raw rows per table, and the hashes."""
    world = get_world(session, world_id)
    tables = store.dump_world(session, world_id)
    clock = store.encode_value(_aware(world.clock))
    hashes = store.state_hashes(tables, clock)
    ctx = WorldContext(
        world_id=world_id, session=session, seed=world.seed, world=world, actor="export"
    )
    apps: dict[str, Any] = {}
    for app in tools_apps():
        if app.export_state is not None:
            apps[app.name] = app.export_state(ctx)
    out: dict[str, Any] = {
        "world_id": world_id,
        "scenario": world.scenario,
        "seed": world.seed,
        "clock": clock,
        **hashes,
        "apps": apps,
    }
    if include_tables:
        out["tables"] = {k: v for k, v in tables.items() if k not in store.HASH_EXCLUDED}
    return out
