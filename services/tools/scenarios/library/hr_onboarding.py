"""HR: onboarding week. Four accepted offers arrive over three days; for each new hire the
assistant announces them to their team on Slack, tracks them in the Notion onboarding
database, asks IT for a laptop, relays the asset tag IT sends back to the manager (and marks
the row 'Laptop ready'), and answers the manager's questions. Facilities and payroll
need lists; the HR lead wants a summary on Slack at the end of the week."""

from __future__ import annotations

from datetime import timedelta

from services.tools.events.spec import Effect, ScenarioInstance
from services.tools.scenarios.base import Scenario
from services.tools.scenarios.generator import Gen, day_name
from services.tools.scenarios.library.common import ASSISTANT_WRITES, workspace_setup
from services.tools.scenarios.story import Story

TEAMS = ["engineering", "sales", "design", "finance", "support", "marketing"]
ROLES = {
    "engineering": "Backend Engineer",
    "sales": "Account Executive",
    "design": "Product Designer",
    "finance": "Financial Analyst",
    "support": "Support Specialist",
    "marketing": "Content Marketer",
}


class HROnboarding(Scenario):
    name = "hr_onboarding"
    title = "Onboarding week: four new hires"
    domain = "hr"
    description = __doc__ or ""

    def build(self, seed: int) -> ScenarioInstance:
        g = Gen(seed, self.name)
        start = g.start()
        user = g.person("HR coordinator")
        recruiter = g.person("Recruiter")
        hr_lead = g.person("Head of People")
        facilities = g.person("Facilities")
        payroll = g.person("Payroll")
        it = g.person("IT service desk")
        teams = g.sample(TEAMS, 4)
        managers = [g.person(f"{t.title()} manager") for t in teams]
        hires = [g.person(ROLES[t], domain="gmail.test") for t in teams]
        start_days = [start.replace(hour=9) + timedelta(days=7 + (i % 2)) for i in range(4)]
        s = Story(g, start, user)
        end = s.at(3, 18, 0)
        channels = {t: [m] for t, m in zip(teams, managers, strict=True)}
        channels["hr"] = [hr_lead, recruiter]
        s.setup = workspace_setup(
            user, g.company, [recruiter, hr_lead, facilities, payroll, it, *managers], channels
        )
        s.setup.append(
            Effect(
                op="notion.setup",
                args={
                    "workspace": g.company,
                    "page": "People Ops",
                    "people": [
                        {"name": p.name, "email": p.email} for p in (user, hr_lead, recruiter)
                    ],
                    "databases": [
                        {
                            "title": "Onboarding",
                            "properties": {
                                "Name": "title",
                                "Team": ["select", TEAMS],
                                "Start": "date",
                                "Status": ["select", ["Announced", "Laptop ready"]],
                            },
                        }
                    ],
                },
            )
        )
        tags = [f"AT-{g.integer(10000, 99999)}" for _ in hires]
        for i, (hire, team, mgr, day, tag) in enumerate(
            zip(hires, teams, managers, start_days, tags, strict=True)
        ):
            first = hire.name.split()[0]
            when = s.at(i % 3, 9 + i)
            due = s.at(i % 3 + 1, 17, 0)
            date_s = day_name(day)
            offer = s.mail(
                f"offer-{i}",
                at=when,
                sender=recruiter,
                subject=f"Offer accepted: {hire.name} ({ROLES[team]})",
                body=(
                    f"Hi {user.name.split()[0]},\n\n{hire.name} accepted our offer for "
                    f"{ROLES[team]} in {team}. Start date: {date_s}. Manager: {mgr.name} "
                    f"({mgr.email}). Personal email: {hire.email}.\n\nPlease do the usual: "
                    f"announce them in #{team} and get IT to prepare a laptop.\n\n"
                    f"{recruiter.name}"
                ),
                checks=[
                    s.posted(
                        due,
                        f"{first} announced in #{team}",
                        channel=team,
                        text_contains=[hire.name, date_s],
                    ),
                    s.sent(
                        due,
                        "laptop requested from IT",
                        to=it.email,
                        body_contains=[hire.name, date_s],
                    ),
                ],
                solution=[
                    {
                        "do": "slack.post",
                        "channel": f"#{team}",
                        "text": f"Please welcome {hire.name}, our new {ROLES[team]}, starting "
                        f"{date_s}!",
                    },
                    {
                        "do": "gmail.send",
                        "to": [it.email],
                        "subject": f"Laptop for new hire {hire.name}",
                        "body": f"Hi IT,\n\nplease prepare a laptop for {hire.name} "
                        f"({ROLES[team]}, {team}), who starts {date_s}.\n\nThanks",
                    },
                ],
            )
            it_reply = s.npc_reply(
                f"it-{i}",
                npc=it,
                trigger=s.when_mailed(it.email).model_copy(update={"text_contains": [hire.name]}),
                body=f"Laptop for {hire.name} is imaged and ready. Asset tag {tag}. "
                f"It can be picked up at the IT desk.",
                checks=[
                    s.sent(
                        end, f"asset tag relayed to {mgr.name}", to=mgr.email, body_contains=[tag]
                    )
                ],
                solution=[
                    {
                        "do": "gmail.forward",
                        "msgid": "",
                        "to": [mgr.email],
                        "body": f"Hi {mgr.name.split()[0]}, {hire.name}'s laptop is ready "
                        f"(asset tag {tag}).",
                    }
                ],
            )
            s.oracle[f"it-{i}"][0]["msgid"] = it_reply
            s.extend(
                f"offer-{i}",
                [
                    s.check(
                        "notion.row",
                        due,
                        "tracked in the Onboarding database",
                        database="Onboarding",
                        title=hire.name,
                        props={"Team": team, "Start": day.date().isoformat()},
                    )
                ],
                [
                    {
                        "do": "notion.add_row",
                        "database": "Onboarding",
                        "properties": {
                            "Name": {"title": [{"text": {"content": hire.name}}]},
                            "Team": {"select": {"name": team}},
                            "Start": {"date": {"start": day.date().isoformat()}},
                            "Status": {"select": {"name": "Announced"}},
                        },
                    }
                ],
            )
            s.extend(
                f"it-{i}",
                [
                    s.check(
                        "notion.row",
                        end,
                        "status is Laptop ready",
                        database="Onboarding",
                        title=hire.name,
                        props={"Status": "Laptop ready"},
                    )
                ],
                [
                    {
                        "do": "notion.update_row",
                        "database": "Onboarding",
                        "title_property": "Name",
                        "title": hire.name,
                        "properties": {"Status": {"select": {"name": "Laptop ready"}}},
                    }
                ],
            )
            s.dm(
                f"ask-{i}",
                at=s.at(2 + i % 2, 10 + i),
                sender=mgr,
                text=f"Hi! Quick one: what's {first}'s start date, and their personal email? "
                f"I want to send a welcome note.",
                checks=[
                    s.posted(
                        end,
                        "manager's question answered",
                        dm_with=mgr.email,
                        text_contains=[date_s, hire.email],
                    )
                ],
                solution=[
                    {
                        "do": "slack.dm",
                        "email": mgr.email,
                        "text": f"{first} starts {date_s}; personal email {hire.email}.",
                    }
                ],
            )
            del offer
        names = [h.name for h in hires]
        badge = s.mail(
            "badges",
            at=s.at(1, 11),
            sender=facilities,
            subject="Badges for new starters",
            body="Hello, could you send me the full names of everyone starting in the next two "
            "weeks? I print badges on Friday.",
            checks=[s.reply("", s.at(2, 17, 0), "all starters listed", body_contains=names)],
            solution=[
                {
                    "do": "gmail.reply",
                    "msgid": "",
                    "body": "Hi, the new starters are: " + ", ".join(names) + ".",
                }
            ],
        )
        s.events[-1].checks[0].args["in_thread_of"] = badge
        s.oracle["badges"][0]["msgid"] = badge
        first_day = min(start_days)
        on_first = [h.name for h, d in zip(hires, start_days, strict=True) if d == first_day]
        others = [n for n in names if n not in on_first]
        pay = s.mail(
            "payroll",
            at=s.at(2, 9, 30),
            sender=payroll,
            subject=f"Starters on {day_name(first_day)}?",
            body=f"Hi, which of the new hires start on {day_name(first_day)}? I need to set up "
            f"their payroll records before then. Only those, please.",
            checks=[
                s.reply(
                    "",
                    s.at(3, 12, 0),
                    "exactly the right starters named",
                    body_contains=on_first,
                    body_excludes=others,
                )
            ],
            solution=[
                {
                    "do": "gmail.reply",
                    "msgid": "",
                    "body": f"Starting {day_name(first_day)}: " + ", ".join(on_first),
                }
            ],
        )
        s.events[-1].checks[0].args["in_thread_of"] = pay
        s.oracle["payroll"][0]["msgid"] = pay
        summary = "; ".join(
            f"{h.name} ({t}, {day_name(d)})"
            for h, t, d in zip(hires, teams, start_days, strict=True)
        )
        s.slack(
            "summary",
            at=s.at(3, 15, 0),
            channel="hr",
            sender=hr_lead,
            text=f"<@{user.handle}> can you post the onboarding summary here: each new hire "
            f"with their team and start date?",
            checks=[
                s.posted(end, "summary posted in #hr", channel="hr", text_contains=names),
                s.collateral(ASSISTANT_WRITES, end),
            ],
            solution=[
                {"do": "slack.post", "channel": "#hr", "text": "Onboarding summary: " + summary}
            ],
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
            people=[recruiter, hr_lead, facilities, payroll, it, *managers, *hires],
            setup=s.setup,
            events=s.events,
            oracle=s.oracle,
            facts={"hires": names, "teams": teams, "asset_tags": tags},
        )
