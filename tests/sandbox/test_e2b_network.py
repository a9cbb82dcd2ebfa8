"""E2B's network settings as the stock SDK sends them to ``POST /v2/sandboxes``, mapped onto a
k3stack network policy (issue 36): by default (internet allowed) the guest has a network device,
so ``get_host`` works on a microVM (the boot itself is in ``test_get_host_auth``); egress is per
``host:port``, so ``denyOut`` always holds and an ``allowOut`` entry without a port is refused.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from shared.contracts.sandbox import NewSandbox, NewSandboxV2


def _net(**body: object) -> tuple[str, list[str]]:
    n = NewSandboxV2.model_validate({"templateID": "busybox", **body}).network
    return n.mode, n.allow


def test_the_sdks_defaults_give_a_network_device():
    assert _net() == ("allowlist", [])
    assert NewSandbox.model_validate({}).network.mode == "none"  # k3stack's own path unchanged


def test_allow_internet_access_and_allow_out():
    assert _net(network={"allowOut": ["api.example.com:443"]}) == (
        "allowlist", ["api.example.com:443"]
    )  # fmt: skip
    assert _net(allow_internet_access=False, network={"allowOut": ["a.b:443"]}) == (
        "allowlist", []
    )  # fmt: skip
    assert _net(network={"denyOut": ["0.0.0.0/0"]}) == ("allowlist", [])
    assert _net(network={"mode": "none"}) == ("none", [])  # k3stack's shape wins


@pytest.mark.parametrize(
    ("network", "named"),
    [({"allowOut": ["1.1.1.1"]}, "has no port"), ({"allowOut": ["8.8.8.0/24"]}, "has no port"),
     ({"egressProxy": {"address": "p:1080"}}, "egressProxy"), ({"allowOut": "x"}, "a list")],
)  # fmt: skip
def test_what_cannot_be_honoured_is_refused(network, named, tmp_path):  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match=named):
        NewSandboxV2.model_validate({"network": network})
    from services.sandbox.app import create_app
    from shared.settings import load_settings

    with TestClient(create_app(load_settings(data_dir=tmp_path), runtimes={})) as c:
        r = c.post("/v2/sandboxes", json={"templateID": "busybox", "network": network})
    assert r.status_code in (400, 422) and named in r.text, r.text
