"""Mock Gmail as the core sees it (see ``services.tools.apps.base``)."""

from services.tools.apps.base import ToolsApp
from services.tools.apps.gmail import ops, routes, state

APP = ToolsApp(
    name="gmail",
    routers=[routes.router, routes.upload_router],
    error_response=routes.error_response,
    error_model=routes.ERROR_MODEL,
    exception_handlers=routes.exception_handlers,
    export_state=state.export_state,
    ensure_setup=state.ensure_setup,
    statements=ops.statements,
    agent_addresses=ops.agent_addresses,
    resolve_input=ops.resolve_input,
)
