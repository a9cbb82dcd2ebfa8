"""HR: leave requests. Six requests arrive over three days. Approve when the employee has
the days left and the dates miss the release blackout; otherwise decline with the reason.
Approved leave goes into #team-calendar. Declined employees ask again the next morning;
managers ask on Slack; two people ask for their remaining balance; the HR lead wants a
summary."""

from __future__ import annotations

from datetime import timedelta

from services.tools.events.spec import ScenarioInstance
from services.tools.scenarios.base import Scenario
from services.tools.scenarios.generator import Gen, day_name
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


class HRLeave(Scenario):
    name = "hr_leave"
    title = "Leave requests against balances and a blackout"
    domain = "hr"
    description = __doc__ or ""

    def build(self, seed: int) -> ScenarioInstance:
        g = Gen(seed, self.name)
        start = g.start()
        user = g.person("HR coordinator")
        lead = g.person("Head of People")
        staff = [g.person("Employee") for _ in range(6)]
        managers = [g.person("Manager") for _ in range(3)]
        balances = {e.email: g.integer(3, 15) for e in staff}
        blackout = start + timedelta(days=21)
        s = Story(g, start, user)
        end = s.at(3, 18, 0)
        s.setup = workspace_setup(
            user,
            g.company,
            [lead, *staff, *managers],
            {"team-calendar": [lead, *managers], "hr": [lead]},
        )
        table = "\n".join(f"{e.name}: {balances[e.email]} days" for e in staff)
        s.setup.append(
            old_mail(
                lead,
                "Leave balances and the release blackout",
                f"Remaining leave balances:\n{table}\n\nNo leave in the release week starting "
                f"{day_name(blackout)} (blackout, 7 days). Decline anything that touches it or "
                f"exceeds the balance, and say why.",
                start.replace(hour=7).isoformat(),
                g.msgid("policy"),
            )
        )
        outcomes = g.shuffle(["ok", "ok", "ok", "balance", "blackout", "balance"])
        approved, declined = [], []
        for i, (emp, outcome) in enumerate(zip(staff, outcomes, strict=True)):
            bal = balances[emp.email]
            if outcome == "balance":
                days, first_day = bal + g.integer(1, 4), start + timedelta(days=35 + i)
            elif outcome == "blackout":
                days, first_day = min(bal, 3), blackout + timedelta(days=g.integer(0, 4))
            else:
                days, first_day = g.integer(1, bal), start + timedelta(days=35 + 3 * i)
            span = f"{days} days from {day_name(first_day)}"
            at, due = s.at(i // 2, 10 + i % 2 * 3), s.at(i // 2 + 1, 17, 0)
            nm = emp.name.split()[0]
            if outcome == "ok":
                approved.append(emp.name)
                ask_by_mail(
                    s,
                    f"request-{i}",
                    at=at,
                    sender=emp,
                    subject=f"Leave request: {span}",
                    body=f"Hi, I'd like to take {span}. Thanks!",
                    due=due,
                    must=["approved"],
                    must_not=["declined"],
                    answer=f"Hi {nm}, approved: {span}. Enjoy!",
                    more_checks=[
                        s.posted(
                            due,
                            "leave posted in #team-calendar",
                            channel="team-calendar",
                            text_contains=[emp.name, day_name(first_day)],
                        )
                    ],
                    more_steps=[
                        {
                            "do": "slack.post",
                            "channel": "#team-calendar",
                            "text": f"{emp.name} is off {span}.",
                        }
                    ],
                )
            else:
                declined.append(emp.name)
                reason = "balance" if outcome == "balance" else "blackout"
                mid = ask_by_mail(
                    s,
                    f"request-{i}",
                    at=at,
                    sender=emp,
                    subject=f"Leave request: {span}",
                    body=f"Hi, I'd like to take {span}. Thanks!",
                    due=due,
                    must=["declined", reason],
                    must_not=["approved"],
                    answer=f"Hi {nm}, sorry, declined: the {reason} rule applies.",
                )
                follow_up(
                    s,
                    f"again-{i}",
                    npc=emp,
                    after_reply_to=mid,
                    body="Could you reconsider? It matters a lot to me.",
                    due=end,
                    must=[reason],
                    must_not=["approved"],
                    answer=f"I'm sorry, the {reason} rule leaves no room; please pick other dates.",
                )
        for j, mgr in enumerate(managers):
            emp = staff[j * 2]
            status = "approved" if emp.name in approved else "declined"
            ask_by_dm(
                s,
                f"manager-{j}",
                at=s.at(2, 9 + j),
                sender=mgr,
                text=f"Was {emp.name}'s leave request approved?",
                due=end,
                must=[status],
                answer=f"{emp.name}'s request was {status}.",
            )
        for j, emp in enumerate(staff[1:3]):
            ask_by_mail(
                s,
                f"balance-{j}",
                at=s.at(1, 15 + j),
                sender=emp,
                subject="How many leave days do I have left?",
                body="Hi, how many days of leave do I have left this year?",
                due=s.at(2, 17, 0),
                must=[f"{balances[emp.email]} days"],
                answer=f"You have {balances[emp.email]} days left (before any pending request).",
            )
        ask_in_channel(
            s,
            "summary",
            at=s.at(3, 14, 0),
            channel="hr",
            sender=lead,
            text="Summary please: whose leave did we approve this week?",
            due=end,
            must=approved,
            must_not=declined,
            answer="Approved this week: " + ", ".join(approved) + ".",
            more_checks=[s.collateral(ASSISTANT_WRITES, end)],
        )
        return ScenarioInstance(
            name=self.name,
            seed=seed,
            title=self.title,
            domain="hr",
            description=self.description,
            start=start,
            end=end,
            user=user,
            people=[lead, *staff, *managers],
            setup=s.setup,
            events=s.events,
            oracle=s.oracle,
            facts={"approved": approved, "declined": declined},
        )
