"""Every scenario of the library, one module each."""

from __future__ import annotations

from services.tools.scenarios.base import Scenario
from services.tools.scenarios.library.empty import EmptyScenario
from services.tools.scenarios.library.finance_expenses import FinanceExpenses
from services.tools.scenarios.library.hr_leave import HRLeave
from services.tools.scenarios.library.hr_onboarding import HROnboarding

ALL: list[Scenario] = [EmptyScenario(), HROnboarding(), HRLeave(), FinanceExpenses()]
