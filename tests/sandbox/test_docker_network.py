"""The ``docker`` runtime's network allowlist (issue 24) on the real Docker Engine: an internal
network plus the egress fence. An allowed host service published on loopback is reachable
from the container; a host service bound to every address but not allowed, the metadata
address and the internet are not; deployed mode refuses a metadata entry before any container
exists. Nothing of the sandbox's network (network, fence rules) is left after its kill.
"""

from __future__ import annotations

import socket
import subprocess
import threading

import pytest

from tests.sandbox.test_docker_runtime import _ensure_dockerd, create, sh

pytestmark = pytest.mark.timeout(280)


def _serve(host: str, reply: bytes) -> tuple[socket.socket, int]:
    """A TCP server answering ``reply`` to every connection, until its socket is closed."""
    srv = socket.create_server((host, 0))

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.sendall(reply)

    threading.Thread(target=loop, daemon=True).start()
    return srv, srv.getsockname()[1]


def _dial(c, sid: str, host: str, port: int) -> dict:  # type: ignore[no-untyped-def]
    return sh(c, sid, f"nc -w 3 {host} {port} </dev/null; echo rc=$?", timeout_s=30)


def test_docker_allowlist_reaches_only_what_it_allows(service):  # type: ignore[no-untyped-def]
    _ensure_dockerd()
    svc = service("docker")
    c = svc.client
    allowed, port = _serve("127.0.0.1", b"allowed-service\n")
    other, other_port = _serve("0.0.0.0", b"must-not-reach\n")  # noqa: S104 - the adversary's target
    try:
        sid = create(c, network={"mode": "allowlist", "allow": [f"127.0.0.1:{port}"]})
        view = c.get(f"/sandboxes/{sid}").json()
        h = svc.manager.live_handle(sid)
        net = h.data["net"]
        guest = h.data["network"][f"127.0.0.1:{port}"]
        assert guest == f"k3s-allow-0:{port}"
        assert str(port) in str(view)  # the guest address is in the sandbox's view

        out = _dial(c, sid, "k3s-allow-0", port)
        assert "allowed-service" in out["stdout"], out
        # the gateway itself serves only the allowed port: another host service is fenced
        out = _dial(c, sid, net["gateway"], other_port)
        assert "must-not-reach" not in out["stdout"] and "rc=0" not in out["stdout"], out
        out = _dial(c, sid, "169.254.169.254", 80)  # the cloud metadata address
        assert "rc=0" not in out["stdout"], out
        out = _dial(c, sid, "1.1.1.1", 80)  # no route out of an internal network
        assert "rc=0" not in out["stdout"], out

        assert c.delete(f"/sandboxes/{sid}").status_code == 204
        rules = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True).stdout
        assert net["bridge"] not in rules
        nets = subprocess.run(["docker", "network", "ls", "--format", "{{.Name}}"],
                              capture_output=True, text=True).stdout  # fmt: skip
        assert net["name"] not in nets.split()
    finally:
        allowed.close()
        other.close()

    svc.manager.sandboxes.deployed = True  # the fence of deployed mode, before the runtime
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, "runtime": "docker",
                                   "network": {"mode": "allowlist",
                                               "allow": ["169.254.169.254:80"]}})  # fmt: skip
    assert r.status_code == 400 and "169.254.169.254" in r.text, r.text
