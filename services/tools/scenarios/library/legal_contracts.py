"""Legal: contract review week. Five counterparties send agreements. Each goes to in-house
counsel; counsel answers the next morning (sign, or the clause that needs changes) and the
assistant relays that to the counterparty. Colleagues ask on Slack where deals stand, one
counterparty asks to confirm a deadline, the general counsel wants the list of contracts
waiting on changes, and a signing call goes on the calendar."""

from __future__ import annotations

from services.tools.events.spec import Effect, ScenarioInstance
from services.tools.scenarios.base import Scenario
from services.tools.scenarios.generator import COMPANIES, Gen, day_name
from services.tools.scenarios.library.common import (
    ASSISTANT_WRITES,
    ask_by_mail,
    ask_in_channel,
    workspace_setup,
)
from services.tools.scenarios.story import Story

DOCS = [
    "NDA",
    "Master Services Agreement",
    "Data Processing Agreement",
    "Reseller Agreement",
    "Statement of Work",
    "Licence Agreement",
]
CLAUSES = [
    "limitation of liability",
    "indemnity",
    "governing law",
    "termination",
    "payment terms",
    "confidentiality term",
]


class LegalContracts(Scenario):
    name = "legal_contracts"
    title = "Contract review with in-house counsel"
    domain = "legal"
    description = __doc__ or ""

    def build(self, seed: int) -> ScenarioInstance:
        g = Gen(seed, self.name)
        start = g.start()
        user = g.person("Legal operations")
        counsel, gc = g.person("Counsel"), g.person("General Counsel")
        sales = g.person("Sales lead")
        firms = [c for c in g.sample(COMPANIES, 6) if c != g.company][:5]
        parties = [g.person("Counterparty", domain=f"{f.lower()}.test") for f in firms]
        s = Story(g, start, user)
        end = s.at(3, 18, 0)
        s.setup = workspace_setup(
            user, g.company, [counsel, gc, sales], {"legal": [counsel, gc, sales]}
        )
        s.setup.append(Effect(op="calendar.setup", args={"email": user.email, "name": user.name}))
        verdicts = g.shuffle(["sign", "sign", "changes", "changes", "changes"])
        waiting = []
        for i, (firm, party, verdict) in enumerate(zip(firms, parties, verdicts, strict=True)):
            doc = g.pick(DOCS)
            clause = g.pick(CLAUSES)
            at, due = s.at(i // 2, 9 + i % 2 * 4), s.at(i // 2 + 1, 17, 0)
            mid = ask_by_mail(
                s,
                f"contract-{i}",
                at=at,
                sender=party,
                subject=f"{doc} - {firm}",
                body=f"Hello, attached is our {doc} for review. Let us know if you can sign.",
                attachments=[
                    {
                        "filename": f"{firm}-{doc}.pdf".replace(" ", "_"),
                        "mime_type": "application/pdf",
                        "content": f"{doc} {firm}",
                    }
                ],
                due=due,
                must=["review"],
                must_not=["signed"],
                answer="Thanks, our counsel is reviewing it; we'll be back shortly.",
                more_checks=[
                    s.sent(due, "sent to counsel", to=counsel.email, body_contains=[firm])
                ],
                more_steps=[
                    {
                        "do": "gmail.send",
                        "to": [counsel.email],
                        "subject": f"Review: {doc} from {firm}",
                        "body": f"Please review the {doc} from {firm}.",
                    }
                ],
            )
            if verdict == "sign":
                text, must, answer = (
                    f"{firm}: fine to sign as is.",
                    ["sign"],
                    "Good news: we are happy to sign as is.",
                )
            else:
                waiting.append(firm)
                text, must, answer = (
                    f"{firm}: needs changes to the {clause} clause before we sign.",
                    [clause],
                    f"We need changes to the {clause} clause before signing.",
                )
            ans = s.npc_reply(
                f"counsel-{i}",
                npc=counsel,
                body=text,
                trigger=s.when_mailed(counsel.email).model_copy(update={"text_contains": [firm]}),
                checks=[
                    s.reply(
                        mid, end, "counsel's verdict relayed", body_contains=must, after_msgid=""
                    )
                ],
                solution=[{"do": "gmail.reply", "msgid": mid, "body": answer}],
            )
            s.events[-1].checks[0].args["after_msgid"] = ans
        for j in range(2):
            firm = firms[j]
            status = "changes" if firm in waiting else "sign"
            ask_in_channel(
                s,
                f"status-{j}",
                at=s.at(2, 11 + j * 3),
                channel="legal",
                sender=sales,
                text=f"Where are we with {firm}'s contract?",
                due=end,
                must=[firm, status],
                answer=f"{firm}: counsel says {status}.",
            )
        deadline_party = parties[-1]
        ask_by_mail(
            s,
            "deadline",
            at=s.at(1, 16),
            sender=deadline_party,
            subject="Deadline for comments",
            body="Can you confirm you'll send comments by Friday?",
            due=s.at(2, 17, 0),
            must=["confirm"],
            answer="I confirm you will have our comments by Friday.",
        )
        call = s.at(4, 15, 0)
        ask_by_mail(
            s,
            "signing-call",
            at=s.at(2, 10),
            sender=gc,
            subject="Signing call",
            body=f"Please put a 'Signing call {firms[0]}' on the calendar for "
            f"{day_name(call)} at 15:00 UTC, 30 minutes, and invite me. Reply when done.",
            due=s.at(3, 12, 0),
            must=["done"],
            answer="Done, it's on the calendar.",
            more_checks=[
                s.check(
                    "calendar.has_event",
                    s.at(3, 12, 0),
                    "call scheduled",
                    summary_contains=["signing call"],
                    start=call.isoformat(),
                    attendees=[gc.email],
                )
            ],
            more_steps=[
                {
                    "do": "calendar.insert",
                    "event": {
                        "summary": f"Signing call {firms[0]}",
                        "start": {"dateTime": call.isoformat()},
                        "end": {"dateTime": call.replace(minute=30).isoformat()},
                        "attendees": [{"email": gc.email}],
                    },
                }
            ],
        )
        ask_in_channel(
            s,
            "waiting",
            at=s.at(3, 14, 0),
            channel="legal",
            sender=gc,
            text="Which counterparties are waiting on changes from us?",
            due=end,
            must=waiting,
            must_not=[f for f in firms if f not in waiting],
            answer="Waiting on changes: " + ", ".join(waiting) + ".",
            more_checks=[s.collateral(ASSISTANT_WRITES, end)],
        )
        return ScenarioInstance(
            name=self.name,
            seed=seed,
            title=self.title,
            domain="legal",
            description=self.description,
            start=start,
            end=end,
            user=user,
            people=[counsel, gc, sales, *parties],
            setup=s.setup,
            events=s.events,
            oracle=s.oracle,
            facts={"firms": firms, "waiting": waiting},
        )
