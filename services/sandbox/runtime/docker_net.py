"""Allowlist networking of ``docker`` sandboxes: an internal network plus the egress fence.

A sandbox with ``network.mode == "allowlist"`` gets its own Docker network created with
``internal=True`` (no route out of the host) and a bridge named here, so that the host's
``INPUT`` chain can be fenced per sandbox: packets from that bridge are dropped unless they go
to the bridge's gateway address on an allowed port. On each allowed port a host-side forwarder
listens on the gateway address and dials the destination (the address the fence pinned in
deployed mode, see ``shared.netguard.pin_allowlist``; no second lookup). So the container
reaches exactly its allowlist, and neither the metadata address, the internet nor other host
services bound to all addresses.

In the guest, destination ``i`` is ``k3s-allow-<i>:<port>`` (and a host name entry is that
name too), both in ``/etc/hosts`` pointing at the gateway: :func:`guest_addresses`. Two
entries with one port cannot share the gateway, so they are refused.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any

from services.sandbox.runtime.base import RuntimeUnavailable, SandboxSpec
from services.sandbox.runtime.portforward import PortForwarder

log = logging.getLogger(__name__)


def guest_addresses(spec: SandboxSpec) -> dict[str, str]:
    """``host:port`` -> where the guest dials it (a pure function of the allowlist)."""
    return {
        dest: f"k3s-allow-{i}:{dest.rsplit(':', 1)[1]}" for i, dest in enumerate(spec.network.allow)
    }


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)


@dataclass
class AllowlistNet:
    """One sandbox container's internal network, its INPUT fence and its forwarders."""

    name: str
    bridge: str
    gateway: str
    ports: list[int]
    targets: list[tuple[str, int]]
    forwarders: list[PortForwarder] = field(default_factory=list)

    def rules(self) -> list[list[str]]:
        """The fence, most specific first (each is inserted at the top in reverse)."""
        accept = [["-i", self.bridge, "-d", self.gateway, "-p", "tcp", "--dport", str(p),
                   "-j", "ACCEPT"] for p in self.ports]  # fmt: skip
        return [*accept, ["-i", self.bridge, "-j", "DROP"]]

    def fence(self) -> None:
        for rule in reversed(self.rules()):
            if _iptables("-C", "INPUT", *rule).returncode != 0:
                done = _iptables("-I", "INPUT", *rule)
                if done.returncode != 0:
                    raise RuntimeUnavailable(f"cannot fence the sandbox network: {done.stderr}")

    def unfence(self) -> None:
        for rule in self.rules():
            while _iptables("-D", "INPUT", *rule).returncode == 0:
                pass

    def forward(self) -> None:
        for port, (host, dport) in zip(self.ports, self.targets, strict=True):

            def connect(host: str = host, dport: int = dport) -> socket.socket:
                return socket.create_connection((host, dport), timeout=10)

            self.forwarders.append(
                PortForwarder(connect, name=f"allow-{port}", bind=(self.gateway, port))
            )

    def close(self) -> None:
        for fwd in self.forwarders:
            fwd.close()
        self.forwarders.clear()

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "bridge": self.bridge, "gateway": self.gateway,
                "ports": self.ports, "targets": [list(t) for t in self.targets]}  # fmt: skip

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> AllowlistNet:
        return cls(name=data["name"], bridge=data["bridge"], gateway=data["gateway"],
                   ports=list(data["ports"]), targets=[(h, int(p)) for h, p in data["targets"]])  # fmt: skip


def create_net(client: Any, sandbox_id: str, spec: SandboxSpec, prefix: str) -> tuple[AllowlistNet, dict[str, str]]:  # fmt: skip
    """The network, fence and forwarders of a new container; also its ``extra_hosts``."""
    allow = spec.network.allow
    ports = [int(d.rsplit(":", 1)[1]) for d in allow]
    if len(set(ports)) != len(ports):
        raise RuntimeUnavailable(
            "runtime 'docker' needs a distinct port per network.allow entry (each is "
            "served on the sandbox network's gateway)"
        )
    targets = []
    for dest, port in zip(allow, ports, strict=True):
        host = dest.rsplit(":", 1)[0].strip("[]")
        targets.append((spec.network.pinned.get(dest, host), port))
    tag = uuid.uuid4().hex[:10]
    bridge = f"k3s{tag}"
    net = client.networks.create(
        f"{prefix}-net-{sandbox_id}-{tag[:6]}", driver="bridge", internal=True,
        labels={"k3stack.sandbox": sandbox_id},
        options={"com.docker.network.bridge.name": bridge},
    )  # fmt: skip
    an = None
    try:
        net.reload()
        gateway = net.attrs["IPAM"]["Config"][0]["Gateway"].split("/")[0]
        an = AllowlistNet(name=net.name, bridge=bridge, gateway=gateway, ports=ports,
                          targets=targets)  # fmt: skip
        an.fence()
        an.forward()
    except BaseException:
        if an is not None:
            an.close()
            an.unfence()
        with contextlib.suppress(Exception):
            net.remove()
        raise
    hosts = {f"k3s-allow-{i}": an.gateway for i in range(len(allow))}
    for dest in allow:
        host = dest.rsplit(":", 1)[0].strip("[]")
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(host)
            continue
        hosts[host] = an.gateway
    return an, hosts


def remove_net(client: Any, an: AllowlistNet) -> None:
    """Forwarders, fence and network of a removed container."""
    an.close()
    an.unfence()
    try:
        client.networks.get(an.name).remove()
    except Exception as exc:  # noqa: BLE001 - already gone
        log.debug("docker network %s: %s", an.name, exc)
