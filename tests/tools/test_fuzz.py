"""Property-based fuzzing of the tools service over its own OpenAPI document (schemathesis):
whatever the generated request, the answer is never a 5xx, its status code is documented, and
its body matches the documented schema (the apps' own error shapes included).

Runs in-process through the session's ``TestClient``: schemathesis turns every operation of
``/openapi.json`` into a Hypothesis strategy of requests; path parameters naming a world point
at a real world (so app routes get past authentication and exercise their logic), ``userId``
is ``me``, and the world token rides on every request.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.tools.conftest import create_world, raw_mail

EXAMPLES = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Deleting or resetting the shared world would only turn later cases into 404s.
SKIP = {("DELETE", "/worlds/{world_id}")}


def _operations(tools_client):  # type: ignore[no-untyped-def]
    doc = tools_client.get("/openapi.json").json()
    schema = schemathesis.openapi.from_dict(doc)
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()
        if (op.method.upper(), op.path) not in SKIP:
            ops.append(op)
    return ops


def test_no_server_errors(tools_client) -> None:  # type: ignore[no-untyped-def]
    world = create_world(tools_client, "hr_onboarding", 5)
    world.advance(by="1d")
    world.g("POST", "messages/send", json={"raw": raw_mail(subject="seed mail")})
    failures: list[str] = []
    ops = _operations(tools_client)
    assert len(ops) > 40  # the apps' routes are in the document

    for op in ops:

        @given(case=op.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case) -> None:  # type: ignore[no-untyped-def]
            if case.path_parameters is not None:
                if "world_id" in case.path_parameters:
                    case.path_parameters["world_id"] = world.id
                if "userId" in case.path_parameters:
                    case.path_parameters["userId"] = "me"
            kwargs = case.as_transport_kwargs(base_url="http://testserver")
            headers = {k: str(v) for k, v in (kwargs.pop("headers", None) or {}).items()}
            headers["Authorization"] = f"Bearer {world.token}"
            allowed = {"method", "url", "params", "json", "content", "data", "files", "cookies"}
            kwargs = {k: v for k, v in kwargs.items() if k in allowed}
            resp = tools_client.request(headers=headers, **kwargs)
            try:
                case.validate_response(resp, checks=CHECKS)
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collect them all
                failures.append(
                    f"{case.operation.method.upper()} {case.operation.path} :: {case.method} "
                    f"{case.formatted_path} {kwargs.get('params')} "
                    f"{str(kwargs.get('json'))[:200]} -> {resp.status_code} {resp.text[:300]}"
                    f" :: {str(exc)[:300]}"
                )

        run()
    routes = sorted({f.split(" :: ")[0] for f in failures})
    assert not failures, "failures on " + ", ".join(routes) + "\n" + "\n".join(failures[:10])
