"""Deployed sandboxes are fenced off the cluster at the API: an allowlist naming an internal,
link-local or unresolvable destination is refused (400, naming the entry), and so is the
``process`` runtime unless enabled (409). Local mode keeps allowing both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from shared.netguard import check_allowlist, pin_allowlist, refusal
from shared.objectstore import LocalObjectStore
from shared.settings import get_settings
from tests.deploy.test_refusals import deployed_env

PUBLIC = {"api.example.com": ["93.184.216.34"], "dual.example.com": ["93.184.216.34", "10.1.2.3"]}


def fake_resolver(host: str) -> list[str]:
    return PUBLIC.get(host, [])


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",  # cloud metadata
        "169.254.10.1",
        "10.43.0.1",  # a Kubernetes Service IP
        "172.16.5.5",
        "192.168.1.10",
        "127.0.0.1",
        "0.0.0.0",
        "100.64.0.1",  # shared address space (CGNAT, some pod networks)
        "224.0.0.1",
        "[::1]",
        "[fe80::1]",
        "[fd00::1]",
        "[::ffff:10.0.0.1]",
        "[::ffff:169.254.169.254]",  # IPv4-mapped metadata, dotted
        "[::ffff:a9fe:a9fe]",  # the same, hex
        "[0:0:0:0:0:ffff:a9fe:a9fe]",  # the same, uncompressed
        "[64:ff9b::a9fe:a9fe]",  # NAT64 of the metadata address
        "[64:ff9b::169.254.169.254]",
        "[64:ff9b::808:808]",  # NAT64 of a public address: still a translator's prefix
        "[64:ff9b:1::a00:1]",  # local-use NAT64
        "[::ffff:0:a9fe:a9fe]",  # SIIT (IPv4-translated) form of the metadata address
        "[::ffff:0:169.254.169.254]",
        "[::ffff:0:808:808]",  # SIIT of a public address: still a translator's prefix
        "[2002:a9fe:a9fe::1]",  # 6to4 carrying 169.254.169.254
        "[2001:0:4136:e378:8000:63bf:f5ff:fffe]",  # Teredo carrying 10.0.0.1
        "[::a9fe:a9fe]",  # IPv4-compatible
        "[fe80::1%eth0]",
        "localhost",
        "k3s-k3stack-postgresql",  # a bare Service name
        "k3s-k3stack-redis.agents.svc.cluster.local",
        "metadata.google.internal",
        "dual.example.com",  # one internal address is enough
        "nowhere.example.com",  # does not resolve
    ],
)
def test_internal_destinations_are_refused(host: str) -> None:
    assert refusal(host, fake_resolver), host
    refused = check_allowlist([f"{host}:443"], deployed=True, resolver=fake_resolver)
    assert refused and f"{host}:443" in refused and "deployed mode" in refused


def test_public_destinations_pass_and_local_mode_allows_all() -> None:
    assert refusal("93.184.216.34", fake_resolver) is None
    assert refusal("api.example.com", fake_resolver) is None
    assert refusal("[2606:4700::1111]", fake_resolver) is None
    assert check_allowlist(["api.example.com:443"], deployed=True, resolver=fake_resolver) is None
    assert check_allowlist(["10.0.0.1:5432", "localhost:80"], deployed=False) is None


def test_link_local_is_named_as_such() -> None:
    assert "link-local" in (refusal("169.254.169.254") or "")


@pytest.fixture
def deployed_sandbox(clean_k3stack_env: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The sandbox service with deployed settings (SQLite file and a local object store stand
    in for PostgreSQL and MinIO: only the create-path fence is under test)."""
    for key, value in deployed_env().items():
        clean_k3stack_env.setenv(key, value)
    clean_k3stack_env.setenv("K3STACK_DATABASE_URL", f"sqlite:///{tmp_path / 'sandbox.db'}")
    get_settings.cache_clear()
    from services.sandbox.app import create_app

    app = create_app(get_settings(), store=LocalObjectStore(tmp_path / "objects"), background=False)
    try:
        with TestClient(app) as client:
            client.headers["X-API-Key"] = deployed_env()["K3STACK_SANDBOX__API_KEY"]
            yield client
    finally:
        get_settings.cache_clear()


def test_api_refuses_an_internal_allowlist_in_deployed_mode(deployed_sandbox: TestClient) -> None:
    for entry in ("10.43.0.10:5432", "169.254.169.254:80", "localhost:6379"):
        r = deployed_sandbox.post(
            "/sandboxes",
            json={
                "templateID": "busybox",
                "runtime": "microvm",
                "network": {"mode": "allowlist", "allow": [entry]},
            },
        )
        assert r.status_code == 400, r.text
        assert entry in r.json()["message"] and "deployed mode" in r.json()["message"]
    assert deployed_sandbox.get("/sandboxes").json() == []  # nothing was created


def test_api_refuses_the_process_runtime_in_deployed_mode(deployed_sandbox: TestClient) -> None:
    r = deployed_sandbox.post("/sandboxes", json={"templateID": "busybox", "runtime": "process"})
    assert r.status_code == 409, r.text
    assert "K3STACK_SANDBOX__ALLOW_PROCESS_RUNTIME" in r.json()["message"]


@pytest.mark.parametrize("entry", ["[64:ff9b::a9fe:a9fe]:80", "[::ffff:169.254.169.254]:80"])
def test_ipv6_notations_of_the_metadata_address_are_refused(entry: str) -> None:
    refused = check_allowlist([entry], deployed=True, resolver=fake_resolver)
    assert refused and entry in refused and "169.254.169.254" in refused.split(": ", 1)[1]


class Rebinding:
    """A resolver whose answer changes: public on the first lookup, the metadata address after."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, host: str) -> list[str]:
        self.calls += 1
        return ["93.184.216.34"] if self.calls == 1 else ["169.254.169.254"]


def test_a_name_is_resolved_once_and_the_checked_address_is_dialled() -> None:
    from services.sandbox.runtime.base import SandboxSpec
    from services.sandbox.runtime.microvm.launch import _guestfwds
    from shared.contracts.sandbox import NetworkPolicy

    resolver = Rebinding()
    entry = "rebind.example.com:80"
    pins, why = pin_allowlist([entry], resolver=resolver)
    assert why is None and pins == {entry: "93.184.216.34"}
    assert resolver.calls == 1  # the check and the pin are the same lookup
    # A second lookup would now say 169.254.169.254: the guest's connections never make one.
    assert refusal("rebind.example.com", resolver)
    network = NetworkPolicy(mode="allowlist", allow=[entry])
    network.pin(pins)
    (fwd,) = _guestfwds(SandboxSpec(network=network))
    assert fwd.endswith(" 93.184.216.34 80") and "rebind.example.com" not in fwd


def test_pins_cannot_come_from_a_request_body(deployed_sandbox: TestClient) -> None:
    from pydantic import ValidationError

    from shared.contracts.sandbox import NewSandbox

    network = {"mode": "allowlist", "allow": ["a.example.com:443"]}
    body = {"templateID": "busybox", "network": {**network, "_pinned": {"a.example.com:443": "1.1.1.1"}}}  # fmt: skip
    assert NewSandbox.model_validate(body).network.pinned == {}  # a private name is no field
    body["network"]["pinned"] = {"a.example.com:443": "10.0.0.1"}
    with pytest.raises(ValidationError, match="set by the service"):
        NewSandbox.model_validate(body)
    r = deployed_sandbox.post("/sandboxes", json={**body, "runtime": "microvm"})
    assert 400 <= r.status_code < 500 and "pinned" in r.text, r.text
    assert deployed_sandbox.get("/sandboxes").json() == []


def test_pins_survive_the_row_and_the_checkpoint_manifest() -> None:
    """Restore, fork and resume rebuild the spec from the sandbox's row (JSON) or a checkpoint
    manifest (JSON in the object store): the pinned answer must come back from both, so a name
    whose DNS answer changed since create is still dialled at the checked address."""
    from services.sandbox.runtime.base import CheckpointManifest, SandboxSpec
    from services.sandbox.runtime.microvm.launch import _guestfwds
    from shared.contracts.sandbox import NetworkPolicy

    resolver = Rebinding()
    entry = "rebind.example.com:80"
    pins, _ = pin_allowlist([entry], resolver=resolver)
    network = NetworkPolicy(mode="allowlist", allow=[entry])
    network.pin(pins)
    assert refusal("rebind.example.com", resolver)  # the name now answers the metadata address
    row_json = json.loads(json.dumps(network.model_dump()))  # the row's JSON column
    manifest = CheckpointManifest(
        id="ck-1", sandbox_id="sbx-1", runtime="microvm", spec=SandboxSpec(network=network)
    )
    stored = CheckpointManifest.model_validate_json(manifest.model_dump_json())
    for spec in (SandboxSpec(network=NetworkPolicy.model_validate(row_json)), stored.spec):
        assert spec.network.pinned == {entry: "93.184.216.34"}
        (fwd,) = _guestfwds(spec)
        assert fwd.endswith(" 93.184.216.34 80") and "rebind" not in fwd


def test_the_api_pins_what_it_checked(deployed_sandbox: TestClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Through POST /sandboxes: the spec handed to the runtime dials the checked address."""
    import shared.netguard as netguard

    resolver = Rebinding()
    monkeypatch.setattr(netguard.pin_allowlist, "__kwdefaults__", {"resolver": resolver})
    seen = {}
    microvm = deployed_sandbox.app.state.manager.runtimes["microvm"]

    def create(sandbox_id, spec, workdir):  # type: ignore[no-untyped-def]
        seen["pinned"] = dict(spec.network.pinned)
        raise RuntimeError("stop here: only the spec is under test")

    monkeypatch.setattr(microvm, "create", create)
    deployed_sandbox.post(
        "/sandboxes",
        json={"templateID": "busybox", "runtime": "microvm",
              "network": {"mode": "allowlist", "allow": ["rebind.example.com:80"]}},
    )  # fmt: skip
    assert seen["pinned"] == {"rebind.example.com:80": "93.184.216.34"} and resolver.calls == 1
