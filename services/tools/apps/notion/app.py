"""Mock Notion as the core sees it (see ``services.tools.apps.base``)."""

from services.tools.apps.base import ToolsApp
from services.tools.apps.notion import routes, state

APP = ToolsApp(
    name="notion",
    routers=[routes.router],
    error_response=routes.error_response,
    error_model=routes.ERROR_MODEL,
    export_state=state.export_state,
    ensure_setup=state.ensure_setup,
)
