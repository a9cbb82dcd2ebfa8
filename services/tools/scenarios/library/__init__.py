"""Every scenario of the library, one module each."""

from __future__ import annotations

from services.tools.scenarios.base import Scenario
from services.tools.scenarios.library.empty import EmptyScenario
from services.tools.scenarios.library.finance_expenses import FinanceExpenses
from services.tools.scenarios.library.finance_invoices import FinanceInvoices
from services.tools.scenarios.library.hr_leave import HRLeave
from services.tools.scenarios.library.hr_onboarding import HROnboarding
from services.tools.scenarios.library.legal_contracts import LegalContracts
from services.tools.scenarios.library.personal_admin import PersonalAdmin

ALL: list[Scenario] = [
    EmptyScenario(),
    HROnboarding(),
    HRLeave(),
    FinanceExpenses(),
    LegalContracts(),
    PersonalAdmin(),
    FinanceInvoices(),
]
