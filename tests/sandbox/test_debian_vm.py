"""The Debian image on real QEMU (marker ``vm``): a debootstrapped Debian 12 root on a shared
read-only qcow2 base, booted through a private copy-on-write overlay per sandbox, with disk
layers in checkpoints (restore and fork give each child its own overlay).

The base image is built once per machine by ``scripts/setup_sandbox.sh`` (debootstrap, then apt
for nodejs + npm; minutes); these tests only boot it. A missing image FAILS them, naming the setup script.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from services.sandbox.runtime.base import ExecRequest, SandboxSpec
from shared.objectstore import LocalObjectStore

pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.timeout(300)]

SPEC = SandboxSpec(image="debian", memory_mb=256)


@pytest.fixture(scope="module")
def runtime():
    from services.sandbox.images.builder import find_debian_image
    from services.sandbox.runtime.microvm import MicroVMRuntime

    rt = MicroVMRuntime()
    ok, why = rt.available()
    if not ok:
        pytest.fail(f"microvm runtime unavailable ({why}); run scripts/setup_sandbox.sh")
    if find_debian_image() is None:
        pytest.fail(
            "Debian base image not built: run scripts/setup_sandbox.sh (debootstrap + apt, minutes)"
        )
    yield rt
    rt.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return LocalObjectStore(tmp_path_factory.mktemp("objects"))


@pytest.fixture(scope="module")
def deb(runtime, tmp_path_factory):
    t0 = time.monotonic()
    h = runtime.create("deb-main", SPEC, tmp_path_factory.mktemp("deb-main"))
    print(f"debian boot: {time.monotonic() - t0:.2f} s")
    yield h
    runtime.destroy(h)


def sh(runtime, h, cmd: str, **kw) -> str:
    r = runtime.exec(h, ExecRequest(cmd=cmd, **kw))
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout


def _backing_chain(path: str) -> list[str]:
    out = subprocess.run(
        ["qemu-img", "info", "-U", "--backing-chain", path], capture_output=True, text=True
    ).stdout
    return [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("image: ")]


def test_debian_tools(runtime, deb):
    t0 = time.monotonic()
    assert sh(runtime, deb, 'python3 -c "print(1+1)"') == "2\n"
    t1 = time.monotonic()
    assert sh(runtime, deb, "git --version").startswith("git version 2.")
    t2 = time.monotonic()
    print(f"python3 exec {1000 * (t1 - t0):.0f} ms, git --version {1000 * (t2 - t1):.0f} ms")
    assert "bookworm" in sh(runtime, deb, "cat /etc/os-release")
    assert sh(runtime, deb, "bash -c 'echo $BASH_VERSION'").startswith("5.")
    assert sh(runtime, deb, "curl --version").startswith("curl ")
    # web-app candidates build and serve with Debian's node (npm beside it, for installs)
    assert sh(runtime, deb, "node --version").startswith("v18.")
    assert (
        sh(runtime, deb, "test -x /usr/bin/npm && test -d /usr/share/nodejs/npm && echo ok")
        == "ok\n"
    )
    assert sh(runtime, deb, "findmnt -n -o SOURCE /").strip() == "/dev/vda"
    # the root is the private overlay over the shared read-only base
    from services.sandbox.images.builder import find_debian_image

    base = find_debian_image().disk
    chain = _backing_chain(deb.data["disk"])
    assert chain[0] == deb.data["disk"] and chain[-1] == str(base)
    assert not (Path(base).stat().st_mode & 0o222)


def test_overlays_are_private_and_checkpoint_captures_disk(runtime, deb, store, tmp_path):
    from services.sandbox.images.builder import find_debian_image

    base = Path(find_debian_image().disk)
    base_mtime = base.stat().st_mtime
    sh(runtime, deb, "mkdir -p /srv/w && echo A > /srv/w/state && sync")
    # a file larger than guest RAM's page cache share lands on the disk, not only in memory
    sh(
        runtime,
        deb,
        "head -c 8000000 /dev/urandom > /srv/w/blob && md5sum /srv/w/blob > /srv/w/sum",
    )
    a = runtime.checkpoint(deb, None, store)
    assert a.runtime_data["disk"]["layers"], a.runtime_data
    sh(runtime, deb, "echo B > /srv/w/state; rm /srv/w/blob; sync")
    b = runtime.checkpoint(deb, a, store)
    assert len(b.runtime_data["disk"]["layers"]) == 2
    t0 = time.monotonic()
    ha = runtime.restore("deb-a", [a], store, tmp_path / "a")
    print(f"debian restore: {time.monotonic() - t0:.2f} s")
    hb = runtime.restore("deb-b", [a, b], store, tmp_path / "b")
    try:
        assert sh(runtime, ha, "cat /srv/w/state") == "A\n"
        # drop the page cache: the blob must come back from A's disk layer, intact
        sh(runtime, ha, "echo 3 > /proc/sys/vm/drop_caches; md5sum -c /srv/w/sum")
        assert sh(runtime, hb, "cat /srv/w/state") == "B\n"
        assert runtime.exec(hb, ExecRequest(cmd="test -e /srv/w/blob")).exit_code == 1
        # children diverge independently, each on its own overlay
        sh(runtime, ha, "echo child-a > /srv/w/state; sync")
        sh(runtime, hb, "echo child-b > /srv/w/state; sync")
        sh(runtime, ha, "echo 3 > /proc/sys/vm/drop_caches")
        assert sh(runtime, ha, "cat /srv/w/state") == "child-a\n"
        assert sh(runtime, hb, "cat /srv/w/state") == "child-b\n"
        assert sh(runtime, deb, "cat /srv/w/state") == "B\n"
        assert ha.data["disk"] != hb.data["disk"] != deb.data["disk"]
        assert _backing_chain(ha.data["disk"])[-1] == str(base)
    finally:
        runtime.destroy(ha)
        runtime.destroy(hb)
    assert base.stat().st_mtime == base_mtime  # the shared base is never written
    assert not Path(ha.data["disk"]).exists()


def test_debian_template_through_the_api(service, runtime):  # type: ignore[no-untyped-def]
    c = service("microvm").client
    r = c.post("/sandboxes", json={"templateID": "debian", "timeout": 0, "memoryMB": 256,
                                   "runtime": "microvm"})  # fmt: skip
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]

    def run(cmd: str) -> dict:
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd})
        assert r.status_code == 200, r.text
        return r.json()

    assert run('python3 -c "print(1+1)"')["stdout"] == "2\n"
    assert run("echo kept > /home/user/f && git init -q /home/user/repo")["exit_code"] == 0
    assert c.post(f"/sandboxes/{sid}/pause").status_code in (200, 204)
    r = c.post(f"/sandboxes/{sid}/resume", json={"timeout": 0})
    assert r.status_code in (200, 201), r.text
    assert (
        run("cat /home/user/f; git -C /home/user/repo status --short | wc -l")["stdout"]
        == "kept\n0\n"
    )
    # fork: each child boots its own overlay over the parent's sealed disk layers
    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 2})
    assert r.status_code == 201, r.text
    assert all(x["error"] is None for x in r.json()), r.json()
    kids = [x["sandbox"]["sandboxID"] for x in r.json()]
    for i, k in enumerate(kids):
        cmd = f"cat /home/user/f; echo {i} > /home/user/f; sync"
        r = c.post(f"/sandboxes/{k}/exec", json={"cmd": cmd})
        assert r.json()["stdout"] == "kept\n", r.text
    cat = {"cmd": "cat /home/user/f"}
    assert [c.post(f"/sandboxes/{k}/exec", json=cat).json()["stdout"] for k in kids] == [
        "0\n",
        "1\n",
    ]
    assert run("cat /home/user/f")["stdout"] == "kept\n"
