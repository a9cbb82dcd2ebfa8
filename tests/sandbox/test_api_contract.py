"""Contract first (STYLE §4): ``services/sandbox/openapi.yaml`` is the API; the app must match it.

Fails on any drift between the committed spec and the schema FastAPI generates, naming the
paths and components that differ, and validates the spec as OpenAPI 3.
"""

from __future__ import annotations

import yaml
from openapi_spec_validator import validate

from services.sandbox.app import OPENAPI_SPEC, create_app
from shared.settings import load_settings


def _generated(tmp_path):  # type: ignore[no-untyped-def]
    return create_app(load_settings(data_dir=tmp_path), runtimes={}).openapi()


def test_spec_is_valid_openapi():
    validate(yaml.safe_load(OPENAPI_SPEC.read_text()))


def test_app_matches_committed_spec(tmp_path):
    spec = yaml.safe_load(OPENAPI_SPEC.read_text())
    live = _generated(tmp_path)
    spec_paths, live_paths = set(spec["paths"]), set(live["paths"])
    assert spec_paths == live_paths, (
        f"paths only in spec: {sorted(spec_paths - live_paths)}; "
        f"only in app: {sorted(live_paths - spec_paths)}"
    )
    drift = [p for p in spec["paths"] if spec["paths"][p] != live["paths"][p]]
    assert not drift, f"operations differ from openapi.yaml at {drift}"
    comps = spec.get("components", {}).get("schemas", {})
    live_comps = live.get("components", {}).get("schemas", {})
    drift = sorted(k for k in set(comps) | set(live_comps) if comps.get(k) != live_comps.get(k))
    assert not drift, f"schemas differ from openapi.yaml: {drift}"


def test_every_error_response_is_the_shared_error():
    spec = yaml.safe_load(OPENAPI_SPEC.read_text())
    for path, item in spec["paths"].items():
        for method, op in item.items():
            assert op.get("operationId"), f"{method} {path} has no operationId"
            for status, resp in op["responses"].items():
                if status.startswith(("4", "5")):
                    ref = resp["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/Error"), f"{method} {path} {status}"
