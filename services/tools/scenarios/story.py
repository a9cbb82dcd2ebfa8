"""The oracle runner under its older name: ``run_oracle(oracle, end, api)`` with a
:class:`~services.tools.scenarios.api.WorldAPI` (kept for callers written against it).

It runs today's oracle (``scenarios.oracle``: MCP tool calls, resolved in the live world)
through the world's MCP endpoint with the API's client, world token and API key.
"""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from services.tools.scenarios.api import WorldAPI
from services.tools.scenarios.drive import HTTPDriver
from services.tools.scenarios.oracle import run_oracle as _run
from shared.contracts.tools import OracleStep


def run_oracle(
    oracle: dict[str, list[dict[str, Any]]], end: datetime, api: WorldAPI
) -> list[OracleStep]:
    driver = HTTPDriver(api.http, api.world_id, api.token, api.api_key)
    return _run(driver, SimpleNamespace(oracle=oracle, end=end))  # type: ignore[arg-type]
