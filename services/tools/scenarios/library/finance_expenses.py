"""Finance: expense approvals. Eight claims arrive over three days. Within the policy limit
and with a receipt: approve. Over the limit: escalate to the CFO (and relay the CFO's decision
when it comes back). No receipt: ask for it, and approve once it arrives. Two colleagues ask on
Slack where their claim stands; the finance lead wants the approved total in #finance."""

from __future__ import annotations

from services.tools.events.spec import ScenarioInstance
from services.tools.scenarios.base import Scenario
from services.tools.scenarios.generator import Gen, money
from services.tools.scenarios.library.common import (
    ASSISTANT_WRITES,
    ask_by_dm,
    ask_by_mail,
    ask_in_channel,
    follow_up,
    old_mail,
    workspace_setup,
)
from services.tools.scenarios.story import Story

CATEGORIES = ["taxi", "client dinner", "hotel", "train ticket", "conference fee", "software"]


class FinanceExpenses(Scenario):
    name = "finance_expenses"
    title = "Expense approvals with a policy limit"
    domain = "finance"
    description = __doc__ or ""

    def build(self, seed: int) -> ScenarioInstance:
        g = Gen(seed, self.name)
        start = g.start()
        user = g.person("Finance operations")
        cfo, lead = g.person("CFO"), g.person("Head of Finance")
        staff = [g.person("Employee") for _ in range(8)]
        limit = g.pick([250, 300, 500])
        s = Story(g, start, user)
        end = s.at(3, 12, 0)
        s.setup = workspace_setup(user, g.company, [cfo, lead, *staff], {"finance": [lead, cfo]})
        s.setup.append(
            old_mail(
                lead,
                "Expense policy reminder",
                f"Approve claims up to {money(limit)} that have a receipt attached. Anything above "
                f"{money(limit)} goes to {cfo.name} ({cfo.email}) for a decision. No receipt, no "
                f"approval: ask for it first.",
                (start.replace(hour=7)).isoformat(),
                g.msgid("policy"),
            )
        )
        kinds = g.shuffle(["ok", "ok", "ok", "ok", "over", "over", "noreceipt", "noreceipt"])
        cfo_says = g.shuffle(["approved", "rejected"])
        approved_total = 0.0
        over_i = 0
        statuses = {}
        for i, (emp, kind) in enumerate(zip(staff, kinds, strict=True)):
            cat = g.pick(CATEGORIES)
            amount = g.amount(limit + 20, limit * 3) if kind == "over" else g.amount(15, limit - 5)
            at = s.at(i // 3, 9 + (i % 3) * 2)
            due = s.at(i // 3 + 1, 17, 0)
            subj = f"Expense claim: {cat}, {money(amount)}"
            receipt = (
                []
                if kind == "noreceipt"
                else [
                    {
                        "filename": f"receipt-{i}.pdf",
                        "mime_type": "application/pdf",
                        "content": f"receipt {cat} {amount}",
                    }
                ]
            )
            body = f"Hi, please approve my {cat} expense of {money(amount)}." + (
                " Receipt attached." if receipt else ""
            )
            first = emp.name.split()[0]
            if kind == "ok":
                approved_total += amount
                statuses[emp.email] = "approved"
                ask_by_mail(
                    s,
                    f"claim-{i}",
                    at=at,
                    sender=emp,
                    subject=subj,
                    body=body,
                    attachments=receipt,
                    due=due,
                    must=["approved"],
                    must_not=["rejected"],
                    answer=f"Hi {first}, approved. Thanks!",
                )
            elif kind == "noreceipt":
                approved_total += amount
                statuses[emp.email] = "waiting for your receipt"
                mid = ask_by_mail(
                    s,
                    f"claim-{i}",
                    at=at,
                    sender=emp,
                    subject=subj,
                    body=body,
                    due=due,
                    must=["receipt"],
                    must_not=["approved"],
                    answer=f"Hi {first}, please send the receipt first.",
                )
                follow_up(
                    s,
                    f"receipt-{i}",
                    npc=emp,
                    after_reply_to=mid,
                    body="Sorry! Here is the receipt.",
                    due=end,
                    must=["approved"],
                    answer="Thanks, approved now.",
                )
                s.events[-1].effects[0].args["attachments"] = [
                    {
                        "filename": f"receipt-{i}.pdf",
                        "mime_type": "application/pdf",
                        "content": "receipt",
                    }
                ]
            else:
                decision = cfo_says[over_i]
                over_i += 1
                if decision == "approved":
                    approved_total += amount
                statuses[emp.email] = "with the CFO"
                mid = ask_by_mail(
                    s,
                    f"claim-{i}",
                    at=at,
                    sender=emp,
                    subject=subj,
                    body=body,
                    attachments=receipt,
                    due=due,
                    must=["cfo"],
                    must_not=["approved"],
                    answer=f"Hi {first}, this is above {money(limit)}, so it is with our CFO.",
                    more_checks=[
                        s.sent(
                            due,
                            "escalated to the CFO",
                            to=cfo.email,
                            body_contains=[emp.name, money(amount)],
                        )
                    ],
                    more_steps=[
                        {
                            "do": "gmail.send",
                            "to": [cfo.email],
                            "subject": f"Approval needed: {emp.name} {money(amount)}",
                            "body": f"{emp.name} claims {money(amount)} for {cat}, above "
                            f"the {money(limit)} limit. Approve?",
                        }
                    ],
                )
                ans = s.npc_reply(
                    f"cfo-{i}",
                    npc=cfo,
                    body=f"{emp.name}'s {cat} claim: {decision}.",
                    trigger=s.when_mailed(cfo.email).model_copy(
                        update={"text_contains": [emp.name]}
                    ),
                    checks=[
                        s.reply(
                            mid,
                            end,
                            "CFO decision relayed",
                            body_contains=[decision],
                            after_msgid="",
                        )
                    ],
                    solution=[
                        {
                            "do": "gmail.reply",
                            "msgid": mid,
                            "body": f"Hi {first}, the CFO's decision: {decision}.",
                        }
                    ],
                )
                s.events[-1].checks[0].args["after_msgid"] = ans
        dm_people = [e for e, k in zip(staff, kinds, strict=True) if k != "ok"][:2]
        for j, emp in enumerate(dm_people):
            st = statuses[emp.email]
            key = "cfo" if "CFO" in st else "receipt"
            ask_by_dm(
                s,
                f"status-{j}",
                at=s.at(1, 15 + j),
                sender=emp,
                text="Hey, did my expense claim go through?",
                due=s.at(2, 17, 0),
                must=[key],
                answer=f"Not yet: it is {st}.",
            )
        total = money(approved_total)
        ask_in_channel(
            s,
            "total",
            at=s.at(2, 16, 0),
            channel="finance",
            sender=lead,
            text="What's the total amount of expenses approved this week?",
            due=end,
            must=[total],
            answer=f"Approved this week: {total}.",
            more_checks=[s.collateral(ASSISTANT_WRITES, end)],
        )
        return ScenarioInstance(
            name=self.name,
            seed=seed,
            title=self.title,
            domain="finance",
            description=self.description,
            start=start,
            end=end,
            user=user,
            people=[cfo, lead, *staff],
            setup=s.setup,
            events=s.events,
            oracle=s.oracle,
            facts={"limit": limit, "approved_total": total, "kinds": kinds},
        )
