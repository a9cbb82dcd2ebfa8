"""The guest agent (guest/agent.c) and its host client, run on the host over a socketpair.

The agent takes ``fd:N`` instead of the virtio-serial device, so the protocol, exec semantics
and file operations are tested here without booting a VM (the VM tests cover the port)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from services.sandbox.guest.protocol import AgentClient, frame
from services.sandbox.images.builder import build_agent
from services.sandbox.runtime.base import (
    ExecRequest,
    GuestFileError,
    GuestFileNotFound,
    GuestPathError,
)
from tests.sandbox.waiting import DEADLINE_S, eventually


@pytest.fixture(scope="module")
def agent_binary(tmp_path_factory):
    return build_agent(tmp_path_factory.mktemp("agent") / "k3s-agent")


@pytest.fixture
def agent(agent_binary, tmp_path):
    host, guest = socket.socketpair()
    proc = subprocess.Popen(
        [str(agent_binary), f"fd:{guest.fileno()}"], pass_fds=[guest.fileno()], cwd=tmp_path
    )
    guest.close()
    client = AgentClient(host, timeout_s=10)
    client.sync(timeout_s=10)
    yield client
    client.close()
    proc.kill()
    proc.wait()


def test_exec_argv_env_cwd_stdin_exit_code(agent, tmp_path):
    r = agent.exec(ExecRequest(argv=["echo", "hello"]))
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "hello\n", False)
    r = agent.exec(
        ExecRequest(
            cmd="echo $FOO; pwd; cat; echo oops >&2; exit 3",
            env={"FOO": "bar"},
            cwd=str(tmp_path),
            stdin=b"from stdin",
        )
    )
    assert r.exit_code == 3
    assert r.stdout == f"bar\n{tmp_path}\nfrom stdin"
    assert r.stderr == "oops\n"


def test_exec_missing_command_is_127(agent):
    r = agent.exec(ExecRequest(argv=["/no/such/binary"]))
    assert r.exit_code == 127 and "No such file" in r.stderr


def test_exec_timeout_kills_the_process_group(agent):
    t = time.monotonic()
    r = agent.exec(ExecRequest(cmd="sleep 30 & sleep 30", timeout_s=0.3))
    assert r.timed_out and r.exit_code == 128 + 9
    assert time.monotonic() - t < 5


def test_exec_stream_yields_output_in_order(agent):
    events = list(agent.exec_stream(ExecRequest(cmd="echo a; sleep 0.1; echo b >&2; exit 1")))
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and kinds[-1] == "exit"
    assert "".join(e.data for e in events if e.kind == "stdout") == "a\n"
    assert "".join(e.data for e in events if e.kind == "stderr") == "b\n"
    assert events[-1].exit_code == 1


def test_large_output_and_concurrent_requests(agent, tmp_path):
    import threading

    big = {}

    def run():
        big["r"] = agent.exec(ExecRequest(cmd="head -c 3000000 /dev/zero | tr '\\0' x"))

    t = threading.Thread(target=run)
    t.start()
    for i in range(20):  # file requests interleave with the streaming exec
        agent.write_file(str(tmp_path / f"f{i}"), b"x" * i)
    t.join(DEADLINE_S)
    assert big["r"].exit_code == 0 and len(big["r"].stdout) == 3_000_000


def test_background_process_and_kill(agent):
    r = agent.exec(ExecRequest(cmd="echo started; sleep 300", background=True))
    assert r.pid and r.exit_code is None
    os.kill(r.pid, 0)  # it runs (on the host here)
    out = Path(f"/tmp/.k3s/bg-{r.pid}.out")
    eventually(lambda: out.exists() and out.read_text(), lambda t: t == "started\n", what="output")
    agent.kill_process(r.pid, 9)

    def exists() -> bool:
        try:
            os.kill(r.pid, 0)
            stat = Path(f"/proc/{r.pid}/stat").read_text()
        except (ProcessLookupError, FileNotFoundError):  # reaped between the two looks
            return False
        return not stat.split(") ", 1)[1].startswith("Z")

    eventually(lambda: not exists(), what="the killed background process gone")


def test_files_write_read_list_stat_remove(agent, tmp_path):
    d = tmp_path / "sub" / "deeper"
    info = agent.write_file(str(d / "a.txt"), b"hello", 0o600)
    assert info.size == 5 and info.mode == 0o600 and not info.is_dir
    assert agent.read_file(str(d / "a.txt")) == b"hello"
    agent.write_file(str(d / "b.bin"), bytes(range(256)) * 1000)
    assert agent.read_file(str(d / "b.bin")) == bytes(range(256)) * 1000
    names = [(e.name, e.is_dir) for e in agent.list_dir(str(tmp_path / "sub"))]
    assert names == [("deeper", True)]
    assert [e.name for e in agent.list_dir(str(d))] == ["a.txt", "b.bin"]
    st = agent.stat(str(d))
    assert st.is_dir and st.path == str(d)
    with pytest.raises(GuestFileError):
        agent.remove(str(tmp_path / "sub"))  # not empty, not recursive
    agent.remove(str(tmp_path / "sub"), recursive=True)
    with pytest.raises(GuestFileNotFound):
        agent.stat(str(d))
    with pytest.raises(GuestFileNotFound):
        agent.read_file(str(d / "a.txt"))
    with pytest.raises(GuestPathError):
        agent.read_file("/../etc/passwd")


def test_resync_drops_a_half_frame_left_by_a_previous_host(agent_binary):
    host, guest = socket.socketpair()
    # a previous host's frame, half delivered, then garbage, waiting before the new host syncs
    guest.sendall(frame("O", 7, b"tail of old output")[5:] + b"\x00garbage")
    proc = subprocess.Popen([str(agent_binary), f"fd:{guest.fileno()}"], pass_fds=[guest.fileno()])
    guest.close()
    try:
        client = AgentClient(host, timeout_s=10, resync=True)  # as after a reconnect
        client.sync(timeout_s=10)
        assert client.exec(ExecRequest(argv=["echo", "ok"])).stdout == "ok\n"
        client.close()
    finally:
        proc.kill()
        proc.wait()
