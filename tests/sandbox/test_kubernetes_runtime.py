"""The ``kubernetes`` runtime against a **stand-in** API server (no cluster exists here): the
loopback server of ``k8s_standin.py`` replays the exchanges of
``fixtures/k8s_exchanges.json`` in order, and fails any request the runtime makes that the
recorded protocol does not have. The runtime speaks through the official client unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.sandbox.runtime.base import ExecRequest, GuestFileNotFound, SandboxSpec
from services.sandbox.runtime.kube import KubernetesRuntime, exit_status, network_policy
from shared.contracts.sandbox import NetworkPolicy
from tests.sandbox.k8s_standin import ReplayServer

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).parent / "fixtures" / "k8s_exchanges.json"


@pytest.fixture
def api():  # type: ignore[no-untyped-def]
    server = ReplayServer(FIXTURE)
    yield server
    server.close()


def _runtime(server: ReplayServer, tmp: Path) -> KubernetesRuntime:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = server.url
    return KubernetesRuntime(tmp, api_client=client.ApiClient(cfg))


def test_a_sandbox_life_over_the_recorded_api(api, tmp_path):  # type: ignore[no-untyped-def]
    rt = _runtime(api, tmp_path)
    ok, why = rt.available()
    assert ok, why
    spec = SandboxSpec(memory_mb=256, env={"GREETING": "hello"},
                       network=NetworkPolicy(mode="allowlist", allow=["93.184.216.34:443"]))  # fmt: skip
    h = rt.create("sbx-k8s1", spec, tmp_path / "w")
    assert h.data["pod"] == "k3s-sbx-k8s1"
    out = rt.exec(h, ExecRequest(cmd="echo hi"))
    assert (out.exit_code, out.stdout) == (0, "hi\n"), (out, api.mismatches)
    out = rt.exec(h, ExecRequest(cmd="echo oops >&2; exit 7"))
    assert (out.exit_code, out.stderr) == (7, "oops\n"), (out, api.mismatches)
    assert rt.exec(h, ExecRequest(cmd="echo $GREETING")).stdout == "hello\n", api.mismatches
    info = rt.write_file(h, "/tmp/a.txt", b"data")
    assert (info.size, info.mode, info.is_dir) == (4, 0o644, False), api.mismatches
    assert rt.read_file(h, "/tmp/a.txt") == b"data"
    with pytest.raises(GuestFileNotFound):
        rt.read_file(h, "/nope")
    rt.destroy(h)
    assert rt.is_alive(h) is False
    assert api.mismatches == [] and api.remaining == []


def test_a_request_off_the_recording_is_caught(api, tmp_path):  # type: ignore[no-untyped-def]
    """The stand-in is strict: a create without the namespace check first is a mismatch."""
    rt = _runtime(api, tmp_path)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the client's error for a 599
        rt.create("sbx-other", SandboxSpec(), tmp_path / "w")
    assert api.mismatches and "expected GET" in api.mismatches[0]


def test_network_policies():
    none = network_policy("s1", SandboxSpec())
    assert none["spec"]["policyTypes"] == ["Ingress", "Egress"] and none["spec"]["egress"] == []
    pol = NetworkPolicy(mode="allowlist", allow=["example.com:443"])
    pol.pin({"example.com:443": "93.184.216.34"})  # the fence's checked address is what is allowed
    rule = network_policy("s1", SandboxSpec(network=pol))["spec"]["egress"][0]
    assert rule == {"to": [{"ipBlock": {"cidr": "93.184.216.34/32"}}],
                    "ports": [{"protocol": "TCP", "port": 443}]}  # fmt: skip
    assert exit_status('{"status": "Success"}') == 0
