"""Getting a web candidate's sandbox, under load: one retry on a boot failure, then the process
runtime where the job let the verifier choose, then a named infrastructure outcome.

A guest that does not boot in time on a loaded host, or a sandbox service that answers 5xx or
not at all, says nothing about the app: such a job must not end like a broken app (reward 0) nor
as an anonymous error, but as ``sandbox_unavailable`` with every attempt's error, so a caller can
re-queue it.
"""

from __future__ import annotations

import time
from typing import Any

import tenacity

from shared.clients import Call, SandboxClient, ServiceError
from shared.contracts import sandbox as sb_contract
from shared.jobs import JobFailed

TAG_KEY = "k3s_verifier"
"""Metadata key every web candidate's sandbox carries (its value: the job), to find orphans."""


class SandboxUnavailable(JobFailed):
    """No sandbox could be started for the app: an infrastructure outcome, not a verdict."""

    def __init__(self, attempts: list[str]) -> None:
        super().__init__(
            "sandbox_unavailable",
            "no sandbox could be started for the app (no verdict; re-queue the job): "
            + " | ".join(attempts),
        )
        self.attempts = attempts


def infrastructure_failure(exc: BaseException) -> bool:
    """A create that failed for the service's sake (5xx, unreachable, timed out), not the body's."""
    if isinstance(exc, ServiceError):
        return exc.status == 0 or exc.status >= 500 or exc.status == 429
    return isinstance(exc, TimeoutError | OSError)


def create_sandbox(
    sandbox: SandboxClient,
    body: dict[str, Any],
    plan: list[tuple[str, str, dict[str, Any]]],
    *,
    create_timeout_s: float,
    orphan_grace_s: float,
    tag: str,
    retries: int = 1,
) -> tuple[sb_contract.Sandbox, str]:
    """Create the app's sandbox: each ``(runtime, note, network)`` of ``plan`` in turn, each tried
    ``1 + retries`` times on an infrastructure failure; (sandbox, the note of the runtime that
    started it). Anything left of a failed try (found by ``tag``) is killed before the next.

    Raises:
        SandboxUnavailable: every try failed for the infrastructure's sake.
        ServiceError: the service refused the request itself (4xx): a bug, not load.
    """
    attempts: list[str] = []
    for runtime, note, network in plan:
        call = Call("POST", "/sandboxes", sb_contract.Sandbox, timeout=create_timeout_s,
                    json={**body, "runtime": runtime, "network": network})  # fmt: skip

        def create(runtime: str = runtime, call: Call = call, before: int = len(attempts)) -> Any:
            started = time.monotonic()
            try:
                return sandbox.send(call)
            except BaseException as exc:
                # a service that answered left nothing behind; one that did not may finish late
                answered = isinstance(exc, ServiceError) and exc.status != 0
                kill_tagged(sandbox, tag, 0 if answered else orphan_grace_s)
                if infrastructure_failure(exc):
                    took = time.monotonic() - started
                    tried = len(attempts) - before + 1
                    attempts.append(f"{runtime} try {tried} ({took:.0f} s): {exc}"[:600])
                raise

        try:
            created = tenacity.Retrying(
                retry=tenacity.retry_if_exception(infrastructure_failure),
                stop=tenacity.stop_after_attempt(1 + retries),
                reraise=True,
            )(create)
        except Exception as exc:
            if not infrastructure_failure(exc):
                raise
            continue  # the next runtime of the plan
        if attempts:
            note += f"; started after {len(attempts)} failed tries"
        return created, note
    raise SandboxUnavailable(attempts)


def kill_tagged(sandbox: SandboxClient, tag: str, grace_s: float) -> list[str]:
    """Kill every sandbox tagged ``tag``; keep looking for ``grace_s`` (a create that timed out
    here may still finish on the service). Returns the ids killed."""
    killed: list[str] = []
    deadline = time.monotonic() + grace_s
    while True:
        _kill_found(sandbox, tag, killed)
        if time.monotonic() >= deadline:
            return killed
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))


def _kill_found(sandbox: SandboxClient, tag: str, killed: list[str]) -> None:
    """One look: kill the tagged sandboxes not killed yet (adding them to ``killed``); a look
    that fails (the service is busy or down) finds nothing this time, the next one may."""
    try:
        for found in sandbox.list(metadata=f"{TAG_KEY}={tag}"):
            if found.sandboxID not in killed:
                sandbox.kill(found.sandboxID)
                killed.append(found.sandboxID)
    except Exception:  # noqa: BLE001 - the grace is not over: look again
        pass
