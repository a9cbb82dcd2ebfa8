"""The ``report`` block: a recurring morning report compiled from three apps and posted to
the team channel; a correction to one Notion figure then calls for a fixed total.

Each report (one per instance, on its own day) states: the day's total from a Notion
database (its rows for that weekday only), how many client visits the calendar has that day,
and the total of the day's order mails. ``report.figures`` computes each from the world as
the check runs, so the correction's check wants the total the fixed database gives.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.tools.scenarios.blocks.common import cast, first, fmt
from services.tools.scenarios.dsl import Scene
from shared.contracts.tools import Trigger

REGIONS = ["North", "South", "East", "West", "Central"]
# Visit times clear of the other blocks' slots (the stand-up at 08:00, meetings at 10, 14,
# 15 and 16, calls at 12, 13 and 17 UTC), so no block's no-double-booking check trips.
VISITS = [(9, 0), (11, 0), (18, 30), (19, 30)]


def _standing(scene: Scene) -> str:
    """The report's database and the standing instruction (created once)."""
    db = scene.word("report_db", "Daily bookings")
    ch = scene.word("report_channel", "reports")
    if "report" not in scene.facts:
        c = cast(scene)
        scene.database(db, {"Name": "title", "Day": "rich_text", "Amount": "number"}, [])
        scene.old_mail.append(
            scene.mail(
                c["lead"],
                "The morning report",
                f"Hi {first(scene.user)},\n\nOn report mornings I'll ping #{ch}. "
                f"Post one message there with three figures: the day's total from the {db} "
                f"(only that weekday's rows), how many {scene.word('visit', 'client visit')}s "
                "are on your calendar that day, and the total of that day's "
                f"{scene.word('orders', 'order confirmation')} mails.\n\n{c['lead'].name}",
                scene.msgid("report-standing"),
                date=scene.at(0, 7, 10).isoformat(),
                labels=["INBOX"],
            )
        )
        scene.facts["report"] = True
    return db


def report(scene: Scene, i: int) -> None:
    c = cast(scene)
    g = scene.gen
    db = _standing(scene)
    # its own channel, so the reports never crowd another block's conversation
    ch = scene.channel(scene.word("report_channel", "reports"), [c["lead"], c["owner"]])
    visit = scene.word("visit", "client visit")
    orders = scene.word("orders", "order confirmation")
    day = 1 + (2 * i) % max(1, scene.spec.days - 2)
    when = scene.at(day, 8)
    weekday = when.strftime("%A")
    lo, hi = float(scene.vocab.get("lo", 100)), float(scene.vocab.get("hi", 5000))
    regions = g.sample(REGIONS, 3)
    amounts = [round(g.amount(lo, hi), 0) for _ in regions]
    rows = [
        {"Name": f"{r} {weekday} #{i + 1}", "Day": weekday, "Amount": a}
        for r, a in zip(regions, amounts, strict=True)
    ]
    other = (when - timedelta(days=1)).strftime("%A")
    rows.append(
        {
            "Name": f"{g.pick(REGIONS)} {other} #{i + 1}",
            "Day": other,
            "Amount": round(g.amount(lo, hi), 0),
        }
    )
    scene.database(db, {}, rows)
    n_visits = g.integer(2, 4)
    for k in range(n_visits):
        start = scene.at(day, *VISITS[k])
        scene.calendar.append(
            {
                "summary": f"{visit.capitalize()}: {g.person('Client').name}",
                "start": {"dateTime": start.isoformat()},
                "end": {"dateTime": (start + timedelta(minutes=45)).isoformat()},
            }
        )
    tomorrow = scene.at(day + 1, *VISITS[2])  # not that day: it does not count
    scene.calendar.append(
        {
            "summary": f"{visit.capitalize()}: {g.person('Client').name}",
            "start": {"dateTime": tomorrow.isoformat()},
            "end": {"dateTime": (tomorrow + timedelta(minutes=45)).isoformat()},
        }
    )
    order_values = [round(g.amount(lo / 2, hi / 2), 0) for _ in range(g.integer(2, 3))]
    bot = scene.person(scene.word("orders_role", "Order desk"), external=True)
    mails = [
        scene.mail(
            bot,
            f"{orders.capitalize()} {g.ref('ORD')}",
            f"Order value: {fmt(scene, v, 'money')}. Thank you for your order.",
            scene.msgid(f"report-{i}-order-{k}"),
        )
        for k, v in enumerate(order_values)
    ]
    date = when.isoformat()
    specs: list[dict[str, Any]] = [
        {
            "source": "notion.sum",
            "database": db,
            "property": "Amount",
            "where": {"Day": weekday},
            "unit": "money",
        },
        {
            "source": "calendar.count",
            "date": date,
            "summary_contains": f"{visit}:",
            "unit": "count",
        },
        {"source": "gmail.sum", "date": date, "subject_contains": orders, "unit": "money"},
    ]
    total, orders_total = sum(amounts), sum(order_values)
    b = f"report-{i}"
    e1 = scene.add(
        f"{b}-morning",
        f"{c['lead'].name} asks for the {weekday} morning report",
        at=when,
        expected=when,
        effects=[
            *mails,
            scene.post(ch, c["lead"], f"Morning report for {weekday}, please."),
        ],
        checks=[
            scene.check(
                "report.figures",
                scene.at(day, 12),
                f"posted the {weekday} figures as the apps hold them",
                channel=ch,
                after_event=f"{b}-morning",
                figures=specs,
                max=1,
            )
        ],
        steps=[
            scene.channel_step(
                ch,
                f"{weekday} report: {db} total {fmt(scene, total, 'money')}; {n_visits} {visit}s on the "
                f"calendar today; {orders}s total {fmt(scene, orders_total, 'money')}.",
            )
        ],
        tags=["report", "recurring"],
    )
    fixed_row = rows[g.integer(0, 2)]
    new = fixed_row["Amount"] + round(g.amount(lo / 4, lo), 0)
    scene.add(
        f"{b}-correction",
        f"{c['owner'].name} corrects one {db} figure",
        trigger=Trigger(after_event=e1, delay_minutes=300),
        expected=scene.at(day, 13),
        effects=[
            scene.post(
                ch,
                c["owner"],
                f"Correction: {fixed_row['Name']} in the {db} should be "
                f"{fmt(scene, new, 'money')}. Can you fix the row and post the corrected "
                f"{weekday} total?",
            )
        ],
        checks=[
            scene.check(
                "notion.row",
                scene.at(day, 17),
                f"{fixed_row['Name']} fixed in the {db}",
                database=db,
                title=fixed_row["Name"],
                props={"Amount": new},
            ),
            scene.check(
                "report.figures",
                scene.at(day, 17),
                f"posted the corrected {weekday} total, as the {db} now sums",
                channel=ch,
                after_event=f"{b}-correction",
                figures=specs[:1],
                max=1,
            ),
        ],
        steps=[
            scene.update_step(db, fixed_row["Name"], {"Amount": new}),
            scene.channel_step(
                ch,
                f"Corrected {weekday} {db} total: {fmt(scene, total - fixed_row['Amount'] + new, 'money')}.",
            ),
        ],
        depends_on=[e1],
        tags=["report", "late-info", "correction"],
    )
