"""Which destinations a sandbox's network allowlist may name.

A guest's allowlisted connections are dialled from the sandbox pod, i.e. from inside the cluster:
naming the release's PostgreSQL, a Service IP or the cloud metadata address would hand a guest
the platform's own network. In deployed mode an allowlist entry is therefore refused unless every
address its host resolves to is a public (globally routable) one; loopback, private (RFC 1918,
ULA), link-local (169.254.0.0/16, fe80::/10, the metadata address), shared/CGNAT, multicast and
reserved addresses are refused, and so are names that do not resolve. An IPv6 address that
carries an IPv4 one is judged by what it carries (IPv4-mapped, IPv4-compatible, 6to4, Teredo), and
NAT64 prefixes (64:ff9b::/96, 64:ff9b:1::/48) are refused outright: a NAT64 gateway turns
64:ff9b::a9fe:a9fe into the metadata address. Local mode allows anything (one developer, their
own machine).

DNS rebinding: a name is resolved once, every address checked, and one of the checked addresses
is pinned (:func:`pin_allowlist`); the runtime dials that address, never the name again, so a
resolver that answers differently at connect time gets nowhere. The Kubernetes NetworkPolicies are
the second fence.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable

Resolver = Callable[[str], list[str]]

# Prefixes whose addresses a translator maps to the IPv4 address they carry, so each whole
# prefix is refused: NAT64 (RFC 6052, RFC 8215) and SIIT's IPv4-translated ::ffff:0:a.b.c.d
# (RFC 2765).
_TRANSLATED = (
    (ipaddress.ip_network("64:ff9b::/96"), "a NAT64 address"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "a NAT64 address"),
    (ipaddress.ip_network("::ffff:0:0:0/96"), "an IPv4-translated address"),
)

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
        why = _address_refusal(addr)
        if why:
            return f"{host} is {why}"
    return None


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, in any of the standard embeddings."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]  # the client's address (the server's is public by definition)
    if int(addr) >> 32 == 0 and int(addr) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def _address_refusal(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if addr.version == 6:
        for net, kind in _TRANSLATED:
            if addr in net:
                inner = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
                return f"{kind} ({addr}: a translator sends it to {inner})"
        inner = _embedded_ipv4(addr)  # type: ignore[arg-type]
        if inner is not None:
            why = _address_refusal(inner)
            return f"{why[:-1]}, carried by {addr})" if why else None
    if not addr.is_global or addr.is_multicast:
        kind = "a link-local" if addr.is_link_local else "an internal"
        return f"{kind} address ({addr})"
    return None


def pin_allowlist(
    allow: Iterable[str], *, resolver: Resolver = resolve
) -> tuple[dict[str, str], str | None]:
    """Resolve each ``host:port`` entry's host once: ``({entry: address to dial}, None)``, or
    ``({}, why)`` for the first refused entry. Every address a name resolves to is checked and
    the first is pinned; an address literal is its own pin."""
    pins: dict[str, str] = {}
    for entry in allow:
        host = entry.rsplit(":", 1)[0]
        bare = host.strip("[]").rstrip(".").lower()
        try:
            resolved = [str(ipaddress.ip_address(bare))]
        except ValueError:
            resolved = resolver(bare) if "." in bare else []
        # Judge exactly the addresses that will be dialled, not a second answer.
        why = refusal(host, lambda _h, r=resolved: r)
        if why:
            return {}, _refused(entry, why)
        pins[entry] = resolved[0].split("%", 1)[0]
    return pins, None


def _refused(entry: str, why: str) -> str:
    return (
        f"network.allow entry {entry!r} refused in deployed mode: {why}; sandboxes may "
        "only reach public addresses"
    )


def check_allowlist(
    allow: Iterable[str], *, deployed: bool, resolver: Resolver = resolve
) -> str | None:
    """The first refused ``host:port`` entry of an allowlist with the reason, or None."""
    if not deployed:
        return None
    return pin_allowlist(allow, resolver=resolver)[1]
