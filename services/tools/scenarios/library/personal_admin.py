"""Personal admin: a busy week at home. Appointments arrive by mail and must land on the
calendar at the right time; bills get the 'Bills' label and go to the partner with the amount;
a landlord offers viewing slots (pick the one that fits the calendar, then pass on the address
they send); an airline moves a flight; the partner asks things on the family Slack."""

from __future__ import annotations

from datetime import timedelta

from services.tools.events.spec import Effect, ScenarioInstance
from services.tools.scenarios.base import Scenario
from services.tools.scenarios.generator import CITIES, Gen, day_name, money
from services.tools.scenarios.library.common import (
    ASSISTANT_WRITES,
    ask_by_dm,
    ask_by_mail,
    follow_up,
    workspace_setup,
)
from services.tools.scenarios.story import Story

APPOINTMENTS = [
    ("Dentist", "Smile Dental"),
    ("Car service", "QuickFix Garage"),
    ("Parent-teacher meeting", "Riverside School"),
    ("Eye test", "Optica"),
    ("Haircut", "Studio Nine"),
]
BILLS = [
    ("Electricity", "PowerCo"),
    ("Water", "AquaServ"),
    ("Internet", "FibreNet"),
    ("Phone", "MobiTel"),
    ("Council tax", "City Council"),
]


def _event(summary: str, start, minutes: int = 60, **extra):  # type: ignore[no-untyped-def]
    return {
        "summary": summary,
        "start": {"dateTime": start.isoformat()},
        "end": {"dateTime": (start + timedelta(minutes=minutes)).isoformat()},
        **extra,
    }


class PersonalAdmin(Scenario):
    name = "personal_admin"
    title = "A week of household admin"
    domain = "personal"
    description = __doc__ or ""

    def build(self, seed: int) -> ScenarioInstance:
        g = Gen(seed, self.name)
        start = g.start()
        user = g.person("Me", domain="home.test")
        partner = g.person("Partner", domain="home.test")
        landlord = g.person("Landlord", domain="lettings.test")
        airline = g.person("Airline", domain="flyaway.test")
        senders = {
            n: g.person(n, domain=f"{org.lower().replace(' ', '')}.test")
            for n, org in APPOINTMENTS + BILLS
        }
        s = Story(g, start, user)
        end = s.at(3, 20, 0)
        s.setup = workspace_setup(user, "home", [partner], {"family": [partner]})
        s.setup.append(Effect(op="calendar.setup", args={"email": user.email, "name": user.name}))
        busy = s.at(5, 10, 0)
        s.setup.append(Effect(op="calendar.add", args={"event": _event("Work offsite", busy, 180)}))
        appts = g.sample(APPOINTMENTS, 4)
        for i, (what, org) in enumerate(appts):
            when = s.at(6 + i, g.pick([9, 11, 14, 16]), 0)
            sender = senders[what]
            ask_by_mail(
                s,
                f"appt-{i}",
                at=s.at(i % 3, 8 + i * 2),
                sender=sender,
                subject=f"{what} booked: {day_name(when)} {when:%H:%M}",
                body=f"Your {what.lower()} at {org} is booked for {day_name(when)} at "
                f"{when:%H:%M} (UTC). Reply to confirm.",
                due=s.at(i % 3 + 1, 20, 0),
                must=["confirm"],
                answer="Thanks, I confirm.",
                more_checks=[
                    s.check(
                        "calendar.has_event",
                        s.at(i % 3 + 1, 20, 0),
                        f"{what} on the calendar",
                        summary_contains=[what],
                        start=when.isoformat(),
                    )
                ],
                more_steps=[{"do": "calendar.insert", "event": _event(f"{what} ({org})", when)}],
            )
        for i, (what, org) in enumerate(g.sample(BILLS, 4)):
            amount = g.amount(20, 300)
            sender = senders[what]
            mid = g.msgid(f"bill-{i}")
            s.mail(
                f"bill-{i}",
                at=s.at(i % 3, 12 + i),
                sender=sender,
                msgid=mid,
                subject=f"Your {what.lower()} bill",
                body=f"Your {what.lower()} bill from {org} is {money(amount)}, due in 14 days.",
                checks=[
                    s.check("gmail.labeled", end, "labelled Bills", msgid=mid, has=["Bills"]),
                    s.sent(
                        end,
                        "partner told the amount",
                        to=partner.email,
                        body_contains=[money(amount)],
                    ),
                ],
                solution=[
                    {"do": "gmail.label", "msgid": mid, "add": ["Bills"]},
                    {
                        "do": "gmail.forward",
                        "msgid": mid,
                        "to": [partner.email],
                        "body": f"{what} bill: {money(amount)}.",
                    },
                ],
            )
        slots = [busy.replace(hour=10, minute=30), s.at(5, 17, 0)]
        city = g.pick(CITIES)
        street = f"{g.integer(1, 99)} {g.pick(['Elm', 'Harbour', 'Mill', 'Station'])} Road"
        view = ask_by_mail(
            s,
            "viewing",
            at=s.at(1, 10),
            sender=landlord,
            subject="Flat viewing",
            body=f"We can show you the flat in {city} on {day_name(slots[0])} at 10:30 or "
            f"at 17:00. Which suits you?",
            due=s.at(2, 12, 0),
            must=["17:00"],
            must_not=["10:30"],
            answer="17:00 works for me, thanks (I'm busy in the morning).",
            more_checks=[
                s.check(
                    "calendar.has_event",
                    s.at(2, 12, 0),
                    "viewing on calendar",
                    summary_contains=["viewing"],
                    start=slots[1].isoformat(),
                )
            ],
            more_steps=[{"do": "calendar.insert", "event": _event("Flat viewing", slots[1])}],
        )
        addr = follow_up(
            s,
            "address",
            npc=landlord,
            after_reply_to=view,
            body=f"Great, see you then. The address is {street}, {city}.",
            due=end,
            must=["thanks"],
            answer="Thanks, see you there.",
        )
        s.events[-1].checks.append(
            s.sent(end, "address passed to the partner", to=partner.email, body_contains=[street])
        )
        s.events[-1].checks[-1].id = "address.c1"
        s.oracle["address"].append(
            {
                "do": "gmail.forward",
                "msgid": addr,
                "to": [partner.email],
                "body": f"Viewing at {street}, {city}.",
            }
        )
        old, new = s.at(8, 7, 0), s.at(8, 13, 0)
        flight = g.ref("FA")
        ask_by_mail(
            s,
            "flight",
            at=s.at(2, 7),
            sender=airline,
            subject=f"Schedule change {flight}",
            body=f"Your flight {flight} on {day_name(old)} now departs at 13:00 instead of "
            f"07:00. Reply to accept.",
            due=s.at(3, 12, 0),
            must=["accept"],
            answer="I accept the new time.",
            more_checks=[
                s.check(
                    "calendar.has_event",
                    s.at(3, 12, 0),
                    "new time on calendar",
                    summary_contains=[flight],
                    start=new.isoformat(),
                ),
                s.sent(
                    s.at(3, 12, 0),
                    "partner told",
                    to=partner.email,
                    body_contains=[flight, "13:00"],
                ),
            ],
            more_steps=[
                {"do": "calendar.insert", "event": _event(f"Flight {flight}", new, 120)},
                {
                    "do": "gmail.send",
                    "to": [partner.email],
                    "subject": "Flight moved",
                    "body": f"Flight {flight} now leaves at 13:00.",
                },
            ],
        )
        first_appt, first_when = appts[0][0], None
        for ev in s.events:
            if ev.id == "appt-0":
                first_when = ev.effects[0].args["subject"].split(": ", 1)[1]
        ask_by_dm(
            s,
            "partner-ask",
            at=s.at(2, 19),
            sender=partner,
            text=f"When is the {first_appt.lower()} again?",
            due=end,
            must=[str(first_when).split()[-1]],
            answer=f"{first_appt}: {first_when}.",
        )
        ask_by_dm(
            s,
            "partner-bills",
            at=s.at(3, 18),
            sender=partner,
            text="Did all the bills come in this week? How many?",
            due=end,
            must=["4"],
            answer="Yes, 4 bills this week; I forwarded each to you.",
        )
        child = g.person("Child").name.split()[0]
        school = g.person("School office", domain="riverside-school.test")
        ask_by_mail(
            s,
            "school-trip",
            at=s.at(1, 8),
            sender=school,
            subject="Museum trip consent",
            body=f"Please reply with your child's first name ({child} is in class 4B) "
            f"and 'consent' to confirm the museum trip.",
            due=s.at(2, 20, 0),
            must=[child, "consent"],
            answer=f"{child} - consent given. Thank you!",
        )
        gym = g.ref("GYM")
        gym_club = g.person("Gym", domain="fitclub.test")
        ask_by_mail(
            s,
            "gym",
            at=s.at(0, 18),
            sender=gym_club,
            subject="Membership renewal",
            body=f"Your membership {gym} renews next month. Reply CANCEL {gym} to stop.",
            due=s.at(1, 20, 0),
            must=[f"cancel {gym}"],
            answer=f"CANCEL {gym}",
            more_checks=[s.collateral(ASSISTANT_WRITES, end)],
        )
        return ScenarioInstance(
            name=self.name,
            seed=seed,
            title=self.title,
            domain="personal",
            description=self.description,
            start=start,
            end=end,
            user=user,
            people=[partner, landlord, airline],
            setup=s.setup,
            events=s.events,
            oracle=s.oracle,
            facts={"flight": flight, "viewing": slots[1].isoformat()},
        )
