"""Every service's OpenAPI document is generated from typed models and guarded against drift:
the committed snapshot must equal what the app generates (regenerate with ``make openapi``),
and the routes other services call answer pydantic models, not free-form dicts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from openapi_spec_validator import validate

from tests.helpers import openapi
from tests.helpers.openapi import CONTRACTS, DRIFT_GUARDED, assert_no_drift, untyped_responses

# Routes other services call that may still answer a free-form body (none left; it can only
# shrink: a listed route that becomes typed fails the test until it is removed here).
UNTYPED_ALLOWED: dict[str, set[str]] = {}


@pytest.mark.parametrize("name", DRIFT_GUARDED)
def test_openapi_matches_committed_snapshot(name):
    assert_no_drift(name)


@pytest.mark.parametrize("name", DRIFT_GUARDED)
def test_snapshot_is_valid_openapi(name):
    validate(json.loads(CONTRACTS[name].snapshot.read_text()))


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_routes_other_services_call_answer_typed_models(name):
    untyped = set(untyped_responses(name))
    allowed = UNTYPED_ALLOWED.get(name, set())
    assert untyped <= allowed, (
        f"{name}: these routes answer a free-form body; give them a response model "
        f"(shared/contracts/{name}.py): {sorted(untyped - allowed)}"
    )
    assert not allowed - untyped, (
        f"{name}: {sorted(allowed - untyped)} are typed now; remove them from UNTYPED_ALLOWED"
    )


def test_drift_fails_with_the_diff_and_the_command(tmp_path, monkeypatch):
    snapshot = tmp_path / "openapi.json"
    contract = replace(CONTRACTS["orchestrator"], snapshot=snapshot)
    monkeypatch.setitem(openapi.CONTRACTS, "orchestrator", contract)
    doc = contract.generate()
    snapshot.write_text(openapi.canonical(doc))
    assert_no_drift("orchestrator")
    doc["paths"]["/platform"]["get"]["summary"] = "an old summary"
    snapshot.write_text(openapi.canonical(doc))
    with pytest.raises(AssertionError) as err:
        assert_no_drift("orchestrator")
    message = str(err.value)
    assert "make openapi" in message and "scripts/openapi.py orchestrator" in message
    assert '-        "summary": "an old summary",' in message
    assert '+        "summary": "Platform Status",' in message


def test_free_form_detection():
    comps = {
        "Typed": {"type": "object", "properties": {"a": {"type": "string"}}},
        "Bag": {"type": "object"},
    }
    free = openapi._free_form
    assert free({}, comps) and free({"type": "object", "additionalProperties": True}, comps)
    assert free({"$ref": "#/components/schemas/Bag"}, comps)
    assert free({"type": "array", "items": {"type": "object"}}, comps)
    assert not free({"$ref": "#/components/schemas/Typed"}, comps)
    assert not free({"type": "array", "items": {"$ref": "#/components/schemas/Typed"}}, comps)
    assert not free({"anyOf": [{"$ref": "#/components/schemas/Typed"}, {"type": "null"}]}, comps)
