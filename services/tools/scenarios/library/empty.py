"""``empty``: a mailbox and a clock, nothing happens. For tests and free-form worlds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.tools.events.spec import Effect, Person, ScenarioInstance
from services.tools.scenarios.base import Scenario


class EmptyScenario(Scenario):
    name = "empty"
    title = "Empty world"
    domain = "test"
    description = "No content, no events: a blank workspace with the clock at 2025-01-06 08:00."

    def build(self, seed: int) -> ScenarioInstance:
        start = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
        user = Person(name="Alex Morgan", email="alex.morgan@k3stack.test", role="assistant's user")
        return ScenarioInstance(
            name=self.name,
            seed=seed,
            title=self.title,
            domain="test",
            description=self.description,
            start=start,
            end=start + timedelta(days=1),
            user=user,
            setup=[Effect(op="gmail.setup_mailbox", args={"email": user.email, "name": user.name})],
        )
