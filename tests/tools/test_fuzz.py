"""Property-based fuzzing of the tools service over its own OpenAPI document: schemathesis's
engine, what ``schemathesis run --checks all --mode all`` drives, in-process, 0 failures.

Phases: examples (enabled, and empty: the document carries no ``example``), coverage
(boundary values, missing required parameters and headers, undeclared methods), fuzzing and
stateful (asserted to run), each run once (no ``max_time``: with one, the
engine repeats fuzzing and stateful until the budget is spent), with positive and negative
generation, so ``negative_data_rejection`` sees schema-invalid requests and
``positive_data_acceptance`` schema-valid ones. Every operation is exercised (asserted),
``EXAMPLES`` fuzzed cases each.

Checks: every check schemathesis 4.32.5 registers (``--checks all``), all enabled:

- per response: ``not_a_server_error``, ``status_code_conformance``,
  ``content_type_conformance``, ``response_headers_conformance``,
  ``response_schema_conformance``, ``negative_data_rejection``, ``positive_data_acceptance``,
  ``missing_required_header``, ``unsupported_method``, ``allow_header_conformance``, and
  ``max_response_time`` (off under ``--checks all`` unless a limit is given; here
  ``MAX_RESPONSE_TIME``, generous for a loaded 2-core runner);
- ``use_after_free`` and ``ensure_resource_availability`` look at the recorded create / read /
  delete chains, which the stateful phase builds from the links schemathesis infers;
- two run but have nothing to act on, by the service's design: ``ignored_auth`` removes the
  credentials of the document's security schemes, and the document declares none (the world
  token rides in ``Authorization`` on every request; Slack answers a missing one HTTP 200
  ``not_authed``, as the real Slack does); ``object_level_authorization`` replays one
  identity's read as another identity of an escalating auth provider, and a world has a single
  agent token (another world's token is another tenant, named in the path: cross-world
  isolation has its own test, ``tests/tools/test_worlds.py::test_world_token_isolation``).

``positive_data_acceptance`` takes, beyond schemathesis's defaults (2xx, 3xx, 401, 403, 404,
409, 429), only the 4xx an operation documents of its own (``rejects(...)`` in its route: a
rejection the real API makes of schema-valid input, its description saying which).

Runs against the session's app (its lifespan already entered by ``tools_client``): path
parameters naming a world point at a real world, so app routes get past authentication and
exercise their logic; ``userId`` is ``me``; the world token and the admin key ride on every
request. Deleting the world would only turn later cases into 404s, so that operation is left
out of the run and covered by ``tests/tools/test_worlds.py``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import schemathesis
from schemathesis.config import OperationConfig, OperationsConfig, SchemathesisConfig
from schemathesis.engine import events, from_schema

from shared.auth import API_KEY_HEADER
from tests.tools.conftest import create_world, raw_mail

EXAMPLES = 3
MAX_RESPONSE_TIME = 30.0  # seconds per response
REQUEST_TIMEOUT = 120.0
SKIP = ("DELETE", "/worlds/{world_id}")
PHASES = ("examples", "coverage", "fuzzing", "stateful")
# positive_data_acceptance's defaults in schemathesis 4.32.5 (set again with an operation's own)
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def _without_lifespan(app: ASGIApp) -> ASGIApp:
    """``app`` with its lifespan acknowledged but not run again (the session's client ran it)."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return wrapped


def _own_rejections(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Operation id -> the 4xx codes its document declares of its own (``rejects(...)``): the
    only 4xx beyond schemathesis's defaults that a schema-valid request may get."""
    out: dict[str, list[str]] = {}
    for item in doc["paths"].values():
        for op in item.values():
            codes = [c for c in op.get("responses", {}) if c.startswith("4") and c != "4XX"]
            if codes:
                out[op["operationId"]] = codes
    return out


def _config(
    headers: dict[str, str], parameters: dict[str, str], rejections: dict[str, list[str]]
) -> SchemathesisConfig:
    config = SchemathesisConfig()
    project = config.projects.override
    project.update(headers=headers, parameters=parameters, request_timeout=REQUEST_TIMEOUT)
    project.phases.update(phases=list(PHASES))
    project.checks.update(included_check_names=["all"], max_response_time=MAX_RESPONSE_TIME)
    project.generation.update(
        modes=["positive", "negative"], max_examples=EXAMPLES, deterministic=True
    )
    project.operations = OperationsConfig(
        operations=[
            OperationConfig.from_dict(
                {
                    "include-operation-id": op_id,
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": [
                                *ACCEPTED,
                                *codes,
                            ]
                        }
                    },
                }
            )
            for op_id, codes in rejections.items()
        ]
    )
    return config


def _describe(recorder: Any, case_id: str, name: str, failure: Any) -> str:
    case = recorder.cases[case_id].value
    interaction = recorder.interactions.get(case_id)
    response = interaction.response if interaction is not None else None
    status = response.status_code if response is not None else "no response"
    return (
        f"{recorder.label} :: {name} :: {case.method} {case.formatted_path} "
        f"query={case.query} body={str(case.body)[:600]} -> {status} "
        f"{response.text_lossy()[:300] if response is not None else ''} :: "
        f"{failure.title}: {str(failure.message)[:300]}"
    )


def test_schemathesis_all_checks(tools_client) -> None:  # type: ignore[no-untyped-def]
    world = create_world(tools_client, "hr_onboarding", 5)
    world.advance(by="1d")
    world.g("POST", "messages/send", json={"raw": raw_mail(subject="seed mail")})
    headers = {
        "Authorization": f"Bearer {world.token}",
        API_KEY_HEADER: tools_client.headers[API_KEY_HEADER],
    }
    rejections = _own_rejections(tools_client.get("/openapi.json").json())
    config = _config(headers, {"world_id": world.id, "userId": "me"}, rejections)
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", _without_lifespan(tools_client.app), config=config
    )
    schema = schema.exclude(method=SKIP[0], path=SKIP[1])
    documented = {
        f"{method.upper()} {path}"
        for path, item in schema.raw_schema["paths"].items()
        for method in item
        if (method.upper(), path) != SKIP
    }
    assert len(documented) > 150  # the apps' routes are in the document

    started = time.monotonic()
    failures: list[str] = []
    tested: set[str] = set()
    cases = 0
    ran_checks: set[str] = set()
    phases: dict[str, float] = {}
    ran_phases: set[str] = set()
    statuses: dict[str, str] = {}
    stop = None
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            cases += len(recorder.cases)
            for node in recorder.cases.values():
                tested.add(node.value.operation.label)
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    ran_checks.add(check.name)
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        failures.append(_describe(recorder, case_id, check.name, failure))
        elif isinstance(event, events.NonFatalError):
            failures.append(f"{event.label} :: error :: {str(event.value)[:300]}")
        elif isinstance(event, events.FatalError):
            raise event.exception
        elif isinstance(event, events.PhaseStarted):
            phases[event.phase.name.value] = event.timestamp
        elif isinstance(event, events.PhaseFinished):
            name = event.phase.name.value
            phases[name] = event.timestamp - phases[name]
            statuses[name] = f"{event.status} {event.phase.skip_reason}"
            if event.status != "skip":
                ran_phases.add(name)
        elif isinstance(event, events.EngineFinished):
            stop = event.stop_reason
            failures.extend(f"run :: {f.title}: {str(f.message)[:300]}" for f in event.failures)
    elapsed = time.monotonic() - started

    # The document carries no ``example``s, so the examples phase has nothing to send.
    assert set(PHASES) - {"examples"} <= ran_phases, statuses
    assert tested == documented, sorted(documented - tested)
    # The checks that act on single responses all ran (a renamed or dropped check shows here).
    assert {
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "positive_data_acceptance",
        "missing_required_header",
        "unsupported_method",
        "max_response_time",
    } <= ran_checks, sorted(ran_checks)
    routes = sorted({f.split(" :: ")[0] for f in failures})
    timings = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases.items())
    print(f"{cases} cases, {len(tested)} operations, {elapsed:.0f} s ({timings})")
    print(*failures, sep="\n")
    assert stop == "completed", stop
    assert not failures, (
        f"{len(failures)} failures in {cases} cases ({elapsed:.0f} s) on "
        + ", ".join(routes)
        + "\n"
        + "\n".join(failures[:15])
    )
