"""Network allowlist of microVM sandboxes on real QEMU (marker ``vm``), through the API.

A tiny HTTP server on 127.0.0.1 (loopback only) stands in for a world's tools service. A
sandbox whose ``network`` allowlist names it fetches from it with busybox ``wget`` (at the
guest address the runtime maps it to); a sandbox without network has no interface at all; an
address not on the list (another loopback server, the host's gateway address, an unmapped
forward slot) is unreachable. Nothing here leaves the loopback interface.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.timeout(300)]


@pytest.fixture
def vm(service):  # type: ignore[no-untyped-def]
    svc = service("microvm")
    infos = {r["name"]: r for r in svc.client.get("/runtimes").json()}
    mv = infos.get("microvm")
    if not mv or not mv["available"]:
        why = mv["reason"] if mv else "runtime not installed"
        pytest.fail(f"microvm runtime unavailable ({why}): run scripts/setup_sandbox.sh")
    return svc


def _create(c, **body):  # type: ignore[no-untyped-def]
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, "memoryMB": 256,
                                   "runtime": "microvm", **body})  # fmt: skip
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def _wget(c, sid: str, url: str):  # type: ignore[no-untyped-def]
    # (busybox-static 1.35's ``wget -T`` segfaults; ``timeout`` bounds a dropped connection)
    r = c.post(
        f"/sandboxes/{sid}/exec", json={"cmd": f"timeout 5 wget -q -O - {url}", "timeout": 20}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_allowlist_reaches_only_listed_loopback_server(vm, http_servers):  # type: ignore[no-untyped-def]
    c = vm.client
    allowed, other = http_servers
    sid = _create(c, network={"mode": "allowlist", "allow": [f"127.0.0.1:{allowed}"]})
    assert c.get(f"/sandboxes/{sid}").json()["network"]["allow"] == [f"127.0.0.1:{allowed}"]
    # the first allowed destination is forwarded from 10.0.2.100 in the guest, and the API
    # says so, so callers need not know the runtime's numbering
    mapping = c.get(f"/sandboxes/{sid}").json()["guest_addresses"]
    assert mapping == {f"127.0.0.1:{allowed}": f"10.0.2.100:{allowed}"}
    out = _wget(c, sid, f"http://{mapping[f'127.0.0.1:{allowed}']}/")
    assert out["exit_code"] == 0 and out["stdout"] == f"hello from {allowed}\n", out
    # not on the list: the other server through the host gateway, the allowed port through
    # the gateway (not through its forward), an unmapped forward slot
    for url in (
        f"http://10.0.2.2:{other}/",
        f"http://10.0.2.2:{allowed}/",
        f"http://10.0.2.101:{other}/",
        f"http://10.0.2.100:{other}/",
    ):
        res = _wget(c, sid, url)
        assert res["exit_code"] != 0 and "hello" not in res["stdout"], (url, res)
    # still reachable after pause/resume (the restored QEMU gets the same forwards)
    assert c.post(f"/sandboxes/{sid}/pause").status_code in (200, 204)
    r = c.post(f"/sandboxes/{sid}/resume", json={"timeout": 0})
    assert r.status_code in (200, 201), r.text
    out = _wget(c, sid, f"http://10.0.2.100:{allowed}/")
    assert out["exit_code"] == 0 and out["stdout"] == f"hello from {allowed}\n", out


def test_no_network_by_default(vm, http_servers):  # type: ignore[no-untyped-def]
    c = vm.client
    allowed, _ = http_servers
    sid = _create(c)
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "ls /sys/class/net"})
    assert r.json()["stdout"].split() == ["lo"]  # no network device at all
    for url in (f"http://10.0.2.100:{allowed}/", f"http://10.0.2.2:{allowed}/"):
        res = _wget(c, sid, url)
        assert res["exit_code"] != 0 and "hello" not in res["stdout"], (url, res)


def _fetch(host: str) -> str:
    """GET / from a forwarded port; the guest server may still be starting (waits for it)."""
    import httpx

    from tests.sandbox.waiting import eventually

    def get() -> str:
        try:
            return httpx.get(f"http://{host}/index.html", timeout=10).text
        except httpx.HTTPError:
            return ""

    return eventually(get, what=f"an answer from {host}")


def test_guest_port_reachable_from_host(service):
    """``GET /sandboxes/{id}/ports/{port}``: a web server in the microVM, fetched from the host."""
    c = service("microvm").client
    body = {"templateID": "busybox", "timeout": 0, "runtime": "microvm"}
    r = c.post("/sandboxes", json={**body, "network": {"mode": "allowlist", "allow": []}})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    r = c.post(
        f"/sandboxes/{sid}/exec", json={"cmd": "mkdir -p /www && echo vm-page > /www/index.html"}
    )
    assert r.json()["exit_code"] == 0, r.text
    r = c.post(
        f"/sandboxes/{sid}/exec", json={"cmd": "httpd -f -p 8000 -h /www", "background": True}
    )
    assert r.status_code == 200, r.text
    r = c.get(f"/sandboxes/{sid}/ports/8000")
    assert r.status_code == 200, r.text
    host = r.json()["host"]
    assert host.startswith("127.0.0.1:") and r.json()["port"] == 8000
    assert _fetch(host) == "vm-page\n"
    assert c.get(f"/sandboxes/{sid}/ports/8000").json()["host"] == host  # idempotent
    assert c.get(f"/sandboxes/{sid}/ports/70000").status_code == 400

    r = c.post("/sandboxes", json=body)  # network mode none: no NIC to forward through
    none_sid = r.json()["sandboxID"]
    r = c.get(f"/sandboxes/{none_sid}/ports/8000")
    assert r.status_code == 409 and "allowlist" in r.json()["message"], r.text
    for s in (sid, none_sid):
        assert c.delete(f"/sandboxes/{s}").status_code == 204
