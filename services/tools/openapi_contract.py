"""The management half of the tools OpenAPI document, committed as ``openapi.yaml`` beside
this file: worlds, clock, events, checks and scenarios (the routes other services call).

The app routes mimic Gmail, Slack, Notion, Calendar and Canvas and follow those APIs (every app
folder's segment is left out, so a new app needs no edit here), so the drift
test (``tests/tools/test_api_contract.py``) guards only this half. Regenerate after a
deliberate change with ``python -m services.tools.openapi_contract``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SPEC = Path(__file__).parent / "openapi.yaml"
MANAGEMENT_PREFIXES = ("/worlds", "/scenarios")
NON_APP_SEGMENTS = ("mcp", "upload")  # the MCP endpoint and Google's media-upload paths


def app_segments() -> tuple[str, ...]:
    from services.tools.db import app_names

    return (*app_names(), *NON_APP_SEGMENTS)


def _is_management(path: str) -> bool:
    if not path.startswith(MANAGEMENT_PREFIXES):
        return False
    parts = path.strip("/").split("/")
    return not (len(parts) >= 3 and parts[0] == "worlds" and parts[2] in app_segments())


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            out.add(ref.rsplit("/", 1)[1])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def management_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``doc`` for the management routes, with the schemas they reach."""
    paths = {p: v for p, v in doc["paths"].items() if _is_management(p)}
    schemas = doc.get("components", {}).get("schemas", {})
    want: set[str] = set()
    _refs(paths, want)
    seen: set[str] = set()
    while want - seen:
        name = sorted(want - seen)[0]
        seen.add(name)
        _refs(schemas.get(name, {}), want)
    return {
        "openapi": doc["openapi"],
        "info": doc["info"],
        "paths": paths,
        "components": {"schemas": {k: schemas[k] for k in sorted(seen) if k in schemas}},
    }


def live_spec() -> dict[str, Any]:
    from services.tools.app import create_app

    return management_spec(create_app().openapi())


if __name__ == "__main__":
    SPEC.write_text(yaml.safe_dump(live_spec(), sort_keys=False, allow_unicode=True))
    print(f"wrote {SPEC}")
