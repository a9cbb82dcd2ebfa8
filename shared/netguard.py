"""Which destinations a sandbox's network allowlist may name.

A guest's allowlisted connections are dialled from the sandbox pod, i.e. from inside the cluster:
naming the release's PostgreSQL, a Service IP or the cloud metadata address would hand a guest
the platform's own network. In deployed mode an allowlist entry is therefore refused unless every
address its host resolves to is a public (globally routable) one; loopback, private (RFC 1918,
ULA), link-local (169.254.0.0/16, fe80::/10, the metadata address), shared/CGNAT, multicast and
reserved addresses are refused, and so are names that do not resolve. Local mode allows anything
(one developer, their own machine). The Kubernetes NetworkPolicies are the second fence: they
also cover a name that resolves differently later.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable

Resolver = Callable[[str], list[str]]

# Names that only mean something inside a cluster or a host, refused before any lookup.
_INTERNAL_SUFFIXES = (".local", ".internal", ".localhost", ".svc", ".cluster.local", ".lan")


def resolve(host: str) -> list[str]:
    """Every address ``host`` resolves to (empty when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def refusal(host: str, resolver: Resolver = resolve) -> str | None:
    """Why ``host`` may not be reached from a deployed sandbox, or None when it may."""
    bare = host.strip("[]").rstrip(".").lower()
    if (
        bare == "localhost"
        or bare.endswith(_INTERNAL_SUFFIXES)
        or "." not in bare
        and ":" not in bare
    ):
        return f"{host} is an internal name"
    try:
        addresses = [ipaddress.ip_address(bare)]
    except ValueError:
        resolved = resolver(bare)
        if not resolved:
            return f"{host} does not resolve"
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolved]
    for addr in addresses:
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        if not addr.is_global or addr.is_multicast:
            kind = "link-local" if addr.is_link_local else "internal"
            return f"{host} is an {kind} address ({addr})"
    return None


def check_allowlist(
    allow: Iterable[str], *, deployed: bool, resolver: Resolver = resolve
) -> str | None:
    """The first refused ``host:port`` entry of an allowlist with the reason, or None."""
    if not deployed:
        return None
    for entry in allow:
        host = entry.rsplit(":", 1)[0]
        why = refusal(host, resolver)
        if why:
            return (
                f"network.allow entry {entry!r} refused in deployed mode: {why}; sandboxes may "
                "only reach public addresses"
            )
    return None
