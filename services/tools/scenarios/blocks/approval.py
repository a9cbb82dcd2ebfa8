"""The ``approval`` block: a decision against a policy figure, six events, a chain 4 deep."""

from __future__ import annotations

from datetime import timedelta

from services.tools.scenarios.blocks.common import FLIP, STATUS, cast, first, fmt, value_for
from services.tools.scenarios.dsl import Scene
from services.tools.scenarios.generator import day_name
from shared.contracts.tools import Trigger


def approval(scene: Scene, i: int) -> None:
    c = cast(scene)
    owner, lead, cap, tracker = c["owner"], c["lead"], c["cap"], c["tracker"]
    d = i % max(1, scene.spec.days - 3)
    h = 9 + (2 * i) % 6
    req = scene.person(scene.word("requester_role", "Colleague"))
    ref = scene.ref()
    v1 = c["outcomes"][i % len(c["outcomes"])]
    v2 = FLIP[v1]
    amount = value_for(scene, v1, cap)
    item = scene.word("item", "request")
    policy = scene.word("policy", "limit")
    subject = f"{item.capitalize()} {ref}"
    b = f"approval-{i}"
    m1, m3, m4, m5 = (scene.msgid(f"{b}-{k}") for k in ("ask", "follow", "late", "react"))
    deadline = scene.at(d + 1, 17)
    scene.facts["refs"][ref] = {"v1": v1, "final": v2, "amount": amount}
    scene.facts["final"][ref] = v2
    values = {"Name": ref, "Amount": amount, "Requester": req.name}

    # 1. the request
    e1 = scene.add(
        f"{b}-request",
        f"{req.name} asks for a decision on {ref}",
        at=scene.at(d, h),
        expected=scene.at(d, h),
        effects=[
            scene.mail(
                req,
                subject,
                f"Hi {first(scene.user)},\n\n{item.capitalize()} {ref} is in: "
                f"{fmt(scene, amount)} for {scene.word('purpose', 'the project')}. Yes or no "
                f"by {day_name(deadline)} 17:00, please?\n\n{req.name}",
                m1,
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                deadline,
                f"committed to '{v1}' on {ref}, to {req.name} only",
                thread_of=m1,
                to=[req.email],
                verdict=v1,
                contains=[ref],
                _other_refs=ref,
            ),
            scene.judge(
                "The reply gives a clear decision and, for a decline, the reason (the "
                f"{policy} of {fmt(scene, cap)}); it is courteous and brief.",
                deadline,
                {"app": "gmail", "thread_of": m1, "until": deadline.isoformat()},
                scene.check(
                    "say.reply",
                    deadline,
                    "the reply states the figure that decides it",
                    thread_of=m1,
                    contains=[fmt(scene, cap if v1 == "decline" else amount)],
                ),
            ),
        ],
        steps=[
            scene.reply_step(
                m1,
                [req],
                subject,
                f"Hi {first(req)}, {ref} is approved: {fmt(scene, amount)} is within the "
                f"{policy} of {fmt(scene, cap)}."
                if v1 == "approve"
                else f"Hi {first(req)}, {ref} is declined: {fmt(scene, amount)} is over the "
                f"{policy} of {fmt(scene, cap)}.",
            )
        ],
        tags=["decision", "judge"],
    )
    # 2. the escalation nobody should need
    answered = Trigger(app="gmail", action="messages.send", where={"thread_msgids": m1})
    scene.add(
        f"{b}-escalation",
        f"{lead.name} escalates {ref} if it has no answer by the deadline",
        at=deadline + timedelta(minutes=1),
        unless=answered,
        expected=None,
        effects=[
            scene.mail(
                lead,
                f"Waiting on {ref}",
                f"{req.name} tells me {ref} still has no answer. Please sort it out today.",
                scene.msgid(f"{b}-esc"),
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                deadline + timedelta(minutes=2),
                f"decided {ref} before the deadline, on its figure (no escalation)",
                thread_of=m1,
                to=[req.email],
                verdict=v1,
                # what decides it, so a constant verdict does not pass half the escalations
                contains=[fmt(scene, cap if v1 == "decline" else amount)],
                until=deadline.isoformat(),
            )
        ],
        depends_on=[e1],
        tags=["escalation", "absence"],
    )
    # 3. the requester's follow-up, which depends on what the agent said
    ask3 = {
        "approve": f"Thanks! Please log {ref} in the {tracker} so it gets processed.",
        "decline": f"Understood. What exactly is the {policy}, so I can resubmit within it?",
    }
    e3 = scene.add(
        f"{b}-follow-up",
        f"{req.name} follows up on the answer",
        trigger=Trigger(
            app="gmail",
            action="messages.send",
            where={"thread_msgids": m1, "to": req.email},  # only mail that reached them
            since_event=e1,
            next_morning="09:00",
        ),
        expected=scene.at(d + 1, 9),
        effects=[
            scene.npc_mail(
                req,
                "Sorry, I can't tell from your answer whether that's a yes or a no. Which is it?",
                m3,
                m1,
                script=[
                    {"if_verdict": "approve", "text": ask3["approve"]},
                    {"if_verdict": "decline", "text": ask3["decline"]},
                ],
            )
        ],
        checks=[
            scene.check(
                "notion.row",
                scene.at(d + 1, 18),
                f"{ref} recorded as Approved with its amount",
                database=tracker,
                title=ref,
                props={"Status": "Approved", "Amount": amount},
            )
            if v1 == "approve"
            else scene.check(
                "say.reply",
                scene.at(d + 1, 18),
                f"told {req.name} the {policy}",
                thread_of=m1,
                after_event=f"{b}-follow-up",
                to=[req.email],
                contains=[fmt(scene, cap)],
                max=1,
                _other_refs=ref,
            )
        ],
        steps=[
            scene.row_step(tracker, values | {"Status": "Approved"})
            if v1 == "approve"
            else scene.reply_step(
                m3,
                [req],
                subject,
                f"The {policy} is {fmt(scene, cap)}; anything up to that can go through.",
            )
        ],
        depends_on=[e1],
        tags=["branching", "npc"],
    )
    # 4. late information reverses the decision
    late = scene.word("late_bad" if v2 == "decline" else "late_good")
    e4 = scene.add(
        f"{b}-late-info",
        f"{owner.name} brings news that reverses {ref}",
        trigger=Trigger(
            app="gmail", action="messages.receive", actor=f"event:{e3}", next_morning="10:00"
        ),
        expected=scene.at(d + 2, 10),
        effects=[
            scene.mail(
                owner,
                f"{ref}: change of plan",
                f"Heads-up: {ref} {late}. The earlier answer can't stand. Tell {req.name} and "
                f"fix the {tracker}.",
                m4,
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                scene.at(d + 2, 18),
                f"corrected the decision on {ref} to '{v2}', to {req.name} only",
                thread_of=m1,
                after_event=f"{b}-late-info",
                to=[req.email],
                verdict=v2,
                contains=[ref],
                max=1,
                _other_refs=ref,
            ),
            scene.check(
                "notion.row",
                scene.at(d + 2, 18),
                f"{ref} recorded as {STATUS[v2]}",
                database=tracker,
                title=ref,
                props={"Status": STATUS[v2], "Amount": amount},
            ),
        ],
        steps=[
            scene.reply_step(
                m3,
                [req],
                subject,
                f"Update on {ref}: I have to correct my earlier answer. It is declined after "
                f"all: it {late}."
                if v2 == "decline"
                else f"Update on {ref}: good news, it is approved after all: it {late}.",
            ),
            scene.update_step(tracker, ref, {"Status": "Rejected"})
            if v1 == "approve"
            else scene.row_step(tracker, values | {"Status": "Approved"}),
        ],
        depends_on=[e3],
        tags=["late-info", "correction", "npc-triggered"],
    )
    # 5. the requester reacts to the correction
    if v2 == "decline":
        react, need = "That's disappointing. Who can I appeal this to?", lead.name
        answer = f"Appeals go to {lead.name}."
    else:
        react = "Great, thanks! When will it be processed?"
        need = day_name(c["processed"])
        answer = f"Decided {item}s are processed on {need}."
    e5 = scene.add(
        f"{b}-reaction",
        f"{req.name} reacts to the correction",
        trigger=Trigger(
            app="gmail",
            action="messages.send",
            where={"thread_msgids": m1, "to": req.email},
            since_event=e4,
            next_morning="09:00",
        ),
        expected=scene.at(d + 3, 9),
        effects=[scene.npc_mail(req, react, m5, m1)],
        checks=[
            scene.check(
                "say.reply",
                scene.at(d + 3, 17),
                f"answered {req.name}'s question from the policy",
                thread_of=m1,
                after_event=f"{b}-reaction",
                to=[req.email],
                contains=[need],
                max=1,
            )
        ],
        steps=[scene.reply_step(m5, [req], subject, answer)],
        depends_on=[e4],
        tags=["npc"],
    )
    # 6. the owner checks the final status on Slack
    scene.add(
        f"{b}-final-status",
        f"{owner.name} asks where {ref} ended up",
        trigger=Trigger(after_event=e5, delay_minutes=180),
        expected=scene.at(d + 3, 12),
        effects=[scene.dm(owner, f"Quick one: where did {ref} end up? Just the final status.")],
        checks=[
            scene.check(
                "say.reply",
                scene.at(d + 3, 18),
                f"told {owner.name} the final status of {ref}",
                dm_with=owner.email,
                about=ref,
                after_event=f"{b}-final-status",
                verdict=v2,
                contains=[ref],
                max=1,
                _other_refs=ref,
            )
        ],
        steps=[
            scene.dm_step(owner, f"{ref}: {'approved' if v2 == 'approve' else 'declined'} (final).")
        ],
        depends_on=[e5],
        tags=["event-triggered"],
    )
