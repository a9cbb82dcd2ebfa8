"""Gmail's labels: the ``users.labels`` methods, label counts and the search environment."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select

from services.tools.apps.gmail.actions._base import (
    APP,
    FIXED_LABELS,
    HIDDEN_SYSTEM,
    SYSTEM_LABELS,
    GmailError,
    not_found,
)
from services.tools.apps.gmail.actions.account import _all_messages, _bump, mailbox
from services.tools.apps.gmail.models import (
    GmailLabel,
)
from services.tools.apps.gmail.search import (
    SearchEnv,
)
from services.tools.context import WorldContext

# --- labels ------------------------------------------------------------------------------


def _user_labels(ctx: WorldContext) -> list[GmailLabel]:
    return list(
        ctx.session.scalars(
            select(GmailLabel).where(GmailLabel.world_id == ctx.world_id).order_by(GmailLabel.id)
        )
    )


def _norm(name: str) -> str:
    import re

    return re.sub(r"[\s/_-]+", "-", name.strip().lower())


def search_env(ctx: WorldContext) -> SearchEnv:
    by_name = {_norm(s): s for s in SYSTEM_LABELS}
    by_name.update(
        {_norm(s.removeprefix("CATEGORY_")): s for s in SYSTEM_LABELS if s.startswith("CATEGORY_")}
    )
    users = _user_labels(ctx)
    for lab in users:
        by_name[_norm(lab.name)] = lab.id
    return SearchEnv(
        now=ctx.now,
        me=mailbox(ctx).email,
        label_ids_by_name=by_name,
        user_label_ids={lab.id for lab in users},
    )


def _label_counts(ctx: WorldContext, label_id: str) -> dict[str, int]:
    msgs = [m for m in _all_messages(ctx) if label_id in m.label_ids]
    unread = [m for m in msgs if "UNREAD" in m.label_ids]
    return {
        "messagesTotal": len(msgs),
        "messagesUnread": len(unread),
        "threadsTotal": len({m.thread_id for m in msgs}),
        "threadsUnread": len({m.thread_id for m in unread}),
    }


def label_json(ctx: WorldContext, label_id: str, counts: bool = False) -> dict[str, Any]:
    if label_id in SYSTEM_LABELS:
        out: dict[str, Any] = {"id": label_id, "name": label_id, "type": "system"}
        if label_id not in HIDDEN_SYSTEM:
            out["messageListVisibility"] = "hide" if label_id in ("SPAM", "TRASH") else "show"
            out["labelListVisibility"] = "labelShow"
    else:
        lab = ctx.session.get(GmailLabel, (ctx.world_id, label_id))
        if lab is None:
            raise not_found()
        out = {
            "id": lab.id,
            "name": lab.name,
            "type": "user",
            "messageListVisibility": lab.message_list_visibility,
            "labelListVisibility": lab.label_list_visibility,
        }
        if lab.color:
            out["color"] = lab.color
    if counts:
        out.update(_label_counts(ctx, label_id))
    return out


def list_labels(ctx: WorldContext) -> list[dict[str, Any]]:
    return [label_json(ctx, s) for s in SYSTEM_LABELS] + [
        label_json(ctx, lab.id) for lab in _user_labels(ctx)
    ]


_VIS_MSG = {"show", "hide"}
_VIS_LABEL = {"labelShow", "labelShowIfUnread", "labelHide"}


def _validate_label_fields(ctx: WorldContext, fields: dict[str, Any], own_id: str | None) -> None:
    if "name" in fields:
        name = fields["name"]
        if not isinstance(name, str) or not name.strip() or len(name) > 225:
            raise GmailError(400, "Invalid label name")
        if _norm(name) in {_norm(s) for s in SYSTEM_LABELS}:
            raise GmailError(400, "Invalid label name")
        for lab in _user_labels(ctx):
            if lab.id != own_id and lab.name.lower() == name.strip().lower():
                raise GmailError(409, "Label name exists or conflicts")
    if fields.get("messageListVisibility") not in (None, *_VIS_MSG):
        raise GmailError(400, "Invalid messageListVisibility")
    if fields.get("labelListVisibility") not in (None, *_VIS_LABEL):
        raise GmailError(400, "Invalid labelListVisibility")


def create_label(ctx: WorldContext, fields: dict[str, Any]) -> dict[str, Any]:
    if not fields.get("name"):
        raise GmailError(400, "Invalid label name")
    _validate_label_fields(ctx, fields, None)
    box = mailbox(ctx)
    box.label_seq += 1
    lab = GmailLabel(
        world_id=ctx.world_id,
        id=f"Label_{box.label_seq}",
        name=fields["name"].strip(),
        message_list_visibility=fields.get("messageListVisibility") or "show",
        label_list_visibility=fields.get("labelListVisibility") or "labelShow",
        color=fields.get("color"),
    )
    ctx.session.add(lab)
    ctx.session.flush()
    ctx.record(APP, "labels.create", {"id": lab.id, "name": lab.name})
    return label_json(ctx, lab.id)


def update_label(
    ctx: WorldContext, label_id: str, fields: dict[str, Any], patch: bool
) -> dict[str, Any]:
    if label_id in SYSTEM_LABELS:
        raise GmailError(400, "Invalid update request")
    lab = ctx.session.get(GmailLabel, (ctx.world_id, label_id))
    if lab is None:
        raise not_found()
    if not patch and not fields.get("name"):
        raise GmailError(400, "Invalid label name")
    _validate_label_fields(ctx, fields, label_id)
    if fields.get("name"):
        lab.name = fields["name"].strip()
    if fields.get("messageListVisibility"):
        lab.message_list_visibility = fields["messageListVisibility"]
    if fields.get("labelListVisibility"):
        lab.label_list_visibility = fields["labelListVisibility"]
    if "color" in fields and (fields["color"] is not None or not patch):
        lab.color = fields["color"]
    ctx.record(APP, "labels.update", {"id": lab.id, "name": lab.name})
    return label_json(ctx, lab.id)


def delete_label(ctx: WorldContext, label_id: str) -> None:
    if label_id in SYSTEM_LABELS:
        raise GmailError(400, "Invalid delete request")
    lab = ctx.session.get(GmailLabel, (ctx.world_id, label_id))
    if lab is None:
        raise not_found()
    for msg in _all_messages(ctx):
        if label_id in msg.label_ids:
            msg.label_ids = [x for x in msg.label_ids if x != label_id]
            msg.history_id = _bump(ctx, "labelRemoved", msg, [label_id])
    ctx.session.delete(lab)
    ctx.record(APP, "labels.delete", {"id": label_id, "name": lab.name})


def _check_label_ids(ctx: WorldContext, ids: Iterable[str], manual: bool) -> list[str]:
    users = {lab.id for lab in _user_labels(ctx)}
    out = []
    for lid in ids:
        if not isinstance(lid, str) or (lid not in SYSTEM_LABELS and lid not in users):
            raise GmailError(400, f"Invalid label: {lid}")
        if manual and lid in FIXED_LABELS:
            raise GmailError(400, f"Invalid label: {lid}")
        out.append(lid)
    return out


def label_id_by_name(ctx: WorldContext, name: str) -> str | None:
    if name.upper() in SYSTEM_LABELS:
        return name.upper()
    for lab in _user_labels(ctx):
        if lab.name.lower() == name.lower():
            return lab.id
    return None
