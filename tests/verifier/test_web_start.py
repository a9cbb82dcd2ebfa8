"""Starting a web candidate's sandbox under load: a boot failure is tried again, then the process
runtime (when the job let the verifier choose), then the job ends ``sandbox_unavailable``, an
infrastructure outcome with every try's error, never a verdict. The sandbox service here is a
small in-process stand-in whose create fails as a loaded host's microVM does."""

from __future__ import annotations

import pytest

from services.verifier.web.start import SandboxUnavailable, create_sandbox
from services.verifier.web.verify import runtime_plan
from shared.clients import ServiceError
from shared.contracts import sandbox as sb


class Service:
    """Answers create with the next of ``outcomes`` (an exception, or a runtime that starts)."""

    def __init__(self, outcomes: list[BaseException | str], runtimes: dict[str, bool]) -> None:
        self.outcomes, self.bodies, self.killed = list(outcomes), [], []
        self.infos = runtimes

    def send(self, call):  # noqa: ANN001, ANN201
        assert (call.method, call.path) == ("POST", "/sandboxes")
        self.bodies.append(call.json)
        got = self.outcomes.pop(0)
        if isinstance(got, BaseException):
            raise got
        return sb.Sandbox(templateID="debian", sandboxID=f"sb-{len(self.bodies)}",
                          runtime=call.json["runtime"], state="running")  # fmt: skip

    def list(self, metadata: str | None = None) -> list:
        return []

    def kill(self, sandbox_id: str) -> None:
        self.killed.append(sandbox_id)

    def runtimes(self) -> list[sb.RuntimeInfo]:
        flags = dict(memory_checkpoint=False, fork=False, network_allowlist=False, default=False)
        return [sb.RuntimeInfo(name=n, available=ok, reason="", **flags)
                for n, ok in self.infos.items()]  # fmt: skip


def _boot_failure() -> ServiceError:
    return ServiceError("sandbox", 500, "guest did not boot; console tail: …", "runtime_error")


def _start(service: Service, requested: str = "auto", retries: int = 1):  # noqa: ANN202
    plan = runtime_plan(service, requested)  # type: ignore[arg-type]
    return create_sandbox(service, {"templateID": "debian"}, plan, create_timeout_s=5,  # type: ignore[arg-type]
                          orphan_grace_s=0, tag="t", retries=retries)  # fmt: skip


def test_one_boot_failure_is_tried_again_on_the_same_runtime() -> None:
    service = Service([_boot_failure(), "ok"], {"microvm": True, "process": True})
    created, note = _start(service)
    assert created.sandboxID == "sb-2"
    assert [b["runtime"] for b in service.bodies] == ["microvm", "microvm"]
    assert note == "microvm runtime; started after 1 failed tries"


def test_a_guest_that_never_boots_falls_back_to_the_process_runtime() -> None:
    service = Service([_boot_failure(), _boot_failure(), "ok"], {"microvm": True, "process": True})
    _, note = _start(service)
    assert [b["runtime"] for b in service.bodies] == ["microvm", "microvm", "process"]
    assert service.bodies[-1]["network"] == {"mode": "none"}
    assert note.startswith("process runtime (fallback: the microvm did not start)")


def test_a_job_that_cannot_start_ends_with_a_named_infrastructure_outcome() -> None:
    unreachable = ServiceError("sandbox", 0, "connection refused", "unreachable")
    service = Service([_boot_failure(), unreachable], {"microvm": True, "process": True})
    with pytest.raises(SandboxUnavailable) as caught:
        _start(service, "microvm")  # asked for: no fallback
    assert caught.value.code == "sandbox_unavailable"
    assert len(caught.value.attempts) == 2 and "guest did not boot" in caught.value.message
    assert "no verdict" in caught.value.message


def test_a_refused_request_is_not_taken_for_load() -> None:
    bad = ServiceError("sandbox", 400, "unknown template", "invalid_request")
    service = Service([bad], {"microvm": True, "process": True})
    with pytest.raises(ServiceError):
        _start(service)
    assert len(service.bodies) == 1
