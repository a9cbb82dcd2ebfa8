"""A guest cannot grow the service's memory through the control port: a frame header claiming
more than the protocol needs (``MAX_FRAME``) cuts the guest off at once, nothing of it is
buffered, and the sandbox is stopped with the reason on its row.

The seam is the host-side reader itself (``AgentClient`` on a socketpair, as the microvm and
Firecracker runtimes use it over their virtio-serial / vsock sockets), with the real agent
answering first, then killed, and its port written by the hostile guest."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from services.sandbox.guest.protocol import BACKLOG, HEADER, MAGIC, MAX_FRAME, AgentClient
from services.sandbox.images.builder import build_agent
from services.sandbox.runtime.base import GuestAgentError
from tests.sandbox.waiting import eventually

GIB = 1 << 30


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def agent_binary(tmp_path_factory):  # type: ignore[no-untyped-def]
    return build_agent(tmp_path_factory.mktemp("agent") / "k3s-agent")


def test_a_guest_lying_about_a_frame_is_cut_off_unbuffered(agent_binary, tmp_path):  # type: ignore[no-untyped-def]
    host, guest = socket.socketpair()
    liar = socket.socket(fileno=os.dup(guest.fileno()))  # the guest's end, kept for after
    agent = subprocess.Popen(
        [str(agent_binary), f"fd:{guest.fileno()}"], pass_fds=[guest.fileno()], cwd=tmp_path
    )
    guest.close()
    client = AgentClient(host, timeout_s=60)
    try:
        client.sync(timeout_s=60)
        client.ping()  # a well-behaved agent first
        agent.kill()  # the guest kills its agent and takes the port over
        agent.wait()
        before = _rss_mib()
        pending: dict[str, BaseException] = {}

        def ask() -> None:
            try:
                client.stat("/")
            except BaseException as exc:  # noqa: BLE001 - the answer under test
                pending["exc"] = exc

        asker = threading.Thread(target=ask)
        asker.start()
        sent = 0
        cut = None
        chunk = b"\0" * (1 << 20)
        try:
            liar.sendall(HEADER.pack(MAGIC, b"D", 1, GIB - 1))  # ~1 GiB promised
            for _ in range(256):  # and up to 256 MiB of it delivered
                liar.sendall(chunk)
                sent += len(chunk)
        except OSError as exc:
            cut = exc
        grown = _rss_mib() - before
        asker.join(timeout=60)
        assert cut is not None, f"the guest wrote {sent >> 20} MiB and was never cut off"
        assert grown < 16, f"service RSS grew {grown:.0f} MiB"
        assert client.closed and client.broken is not None
        assert str(GIB - 1) in client.broken and str(MAX_FRAME) in client.broken, client.broken
        assert isinstance(pending.get("exc"), GuestAgentError), pending
        assert str(GIB - 1) in str(pending["exc"])  # the waiting call says why
        with pytest.raises(GuestAgentError, match="limit"):
            client.ping()
    finally:
        client.close()
        liar.close()
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_a_broken_guest_is_stopped_with_its_reason(proc, monkeypatch):  # type: ignore[no-untyped-def]
    """The reaper stops a sandbox whose runtime reports its guest cut off, and its row keeps
    the reason (the process runtime stands in for microvm: the same reaper path)."""
    c, m = proc.client, proc.manager
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    other = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0}).json()["sandboxID"]
    live = m.state.live[sid]
    why = "guest agent protocol error: a frame claiming 1073741823 bytes; control port cut off"
    monkeypatch.setattr(
        type(live.runtime), "broken_reason", lambda self, h: why if h.sandbox_id == sid else None
    )
    assert m.tick()["lost"] == [sid]
    detail = eventually(
        lambda: c.get(f"/sandboxes/{sid}").json(), lambda d: d["state"] != "running"
    )
    assert detail["state"] == "error" and why in detail["error"], detail
    assert not live.runtime.is_alive(live.handle)  # its processes are gone
    assert c.get(f"/sandboxes/{other}").json()["state"] == "running"


def test_replies_a_caller_has_not_taken_wait_in_the_guest():  # type: ignore[no-untyped-def]
    """Frames of a legal size for a live request, sent faster than its caller takes them (a
    guest flooding a download): the host holds about BACKLOG of them and the guest's writes
    wait; once the caller reads, every byte arrives in order."""
    host, guest = socket.socketpair()
    client = AgentClient(host, timeout_s=60)
    client.version = 2  # a streamed read, as agent version 2 answers it
    frames, size = 48, 1 << 20
    chunks = client.read_file_stream("/big", limit=frames * size)
    first: list[bytes] = []
    reader = threading.Thread(target=lambda: first.append(next(chunks)))
    reader.start()
    rid = HEADER.unpack(guest.recv(HEADER.size, socket.MSG_WAITALL))[2]  # the request's id
    sent: list[int] = []

    def flood() -> None:
        for i in range(frames):
            guest.sendall(HEADER.pack(MAGIC, b"D", rid, size) + bytes([i]) * size)
            sent.append(i)
        guest.sendall(HEADER.pack(MAGIC, b"K", rid, 0))

    before = _rss_mib()
    threading.Thread(target=flood, daemon=True).start()
    try:
        reader.join(timeout=60)
        assert first and first[0] == b"\0" * size
        eventually(lambda: len(sent), lambda n: n >= BACKLOG // size, timeout_s=60,
                   what="the guest filled the backlog")  # fmt: skip
        # a window to move on in: the guest gets out the backlog plus what the socket buffers
        # hold (a slow host only moves less), far from all of it
        time.sleep(1.0)
        assert len(sent) <= BACKLOG // size + 4 < frames, (len(sent), frames)
        grown = _rss_mib() - before
        assert grown < 16 + BACKLOG / (1 << 20), f"RSS grew {grown:.0f} MiB"
        got = [c[0] for c in chunks]  # the caller reads on: all of it, in order
        assert got == list(range(1, frames)), got[:5]
    finally:
        client.close()
        guest.close()
