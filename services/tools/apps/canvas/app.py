"""Mock Canvas LMS as the core sees it (see ``services.tools.apps.base``)."""

from services.tools.apps.base import ToolsApp
from services.tools.apps.canvas import errors, extra_routes, ops, routes, state

APP = ToolsApp(
    name="canvas",
    # the calls beyond the core ones (assignment.edit, bulk grading, groups, users by id, ...)
    routers=[routes.router, extra_routes.extra_router],
    error_response=errors.error_response,
    error_model=errors.ERROR_MODEL,
    export_state=state.export_state,
    ensure_setup=state.ensure_setup,
    statements=ops.statements,
    agent_addresses=ops.agent_addresses,
)
