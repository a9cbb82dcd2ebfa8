"""The sandbox API end to end on the ``process`` runtime (bubblewrap + overlayfs): fast, no VM.

The same scenarios as the microVM acceptance tests, with the process runtime's documented
difference: checkpoints, pause and fork keep files, not processes (``memory_checkpoint:
false``), so memory fork is refused with 409 and filesystem fork works.
"""

from __future__ import annotations

import json

import pytest

from tests.sandbox.waiting import eventually


def create(c, **body):  # type: ignore[no-untyped-def]
    r = c.post("/sandboxes", json={"templateID": "busybox", "timeout": 0, **body})
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def sh(c, sid, cmd, **kw):  # type: ignore[no-untyped-def]
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_runtimes_report_what_checkpoints_cover(proc):
    infos = {r["name"]: r for r in proc.client.get("/runtimes").json()}
    assert infos["process"]["available"] is True
    assert infos["process"]["memory_checkpoint"] is False
    assert infos["firecracker"]["available"] is False
    assert "firecracker" in infos["firecracker"]["reason"]


def test_create_exec_files_pause_resume(proc):
    c = proc.client
    sid = create(c, metadata={"owner": "t"}, envVars={"GREETING": "hi"})
    detail = c.get(f"/sandboxes/{sid}").json()
    assert detail["state"] == "running" and detail["runtime"] == "process"
    assert detail["memory_checkpoint"] is False and detail["metadata"] == {"owner": "t"}

    out = sh(c, sid, "echo $GREETING; pwd")
    assert out["exit_code"] == 0 and out["stdout"] == "hi\n/home/user\n"
    assert sh(c, sid, "exit 7")["exit_code"] == 7

    r = c.put(f"/sandboxes/{sid}/files", params={"path": "notes/a.txt"}, content=b"one\n")
    assert r.status_code == 200 and r.json()["path"] == "/home/user/notes/a.txt"
    assert (
        c.get(f"/sandboxes/{sid}/files", params={"path": "/home/user/notes/a.txt"}).content
        == b"one\n"
    )
    names = [
        e["name"] for e in c.get(f"/sandboxes/{sid}/files/list", params={"path": "notes"}).json()
    ]
    assert names == ["a.txt"]
    st = c.get(f"/sandboxes/{sid}/files/stat", params={"path": "notes"}).json()
    assert st["type"] == "dir"

    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    d = c.get(f"/sandboxes/{sid}").json()
    assert d["state"] == "paused" and d["head_checkpoint_id"]
    assert not proc.manager.running_ids()
    r = c.post(f"/sandboxes/{sid}/resume", json={})
    assert r.status_code == 201 and r.json()["state"] == "running"
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "notes/a.txt"}).content == b"one\n"
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
    assert c.get(f"/sandboxes/{sid}").status_code == 404
    proc.manager.check_invariants()


def test_many_pause_resume_cycles_keep_every_append(proc):
    c = proc.client
    sid = create(c)
    for i in range(30):
        sh(c, sid, f"echo {i} >> log.txt")
        assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
        assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    lines = c.get(f"/sandboxes/{sid}/files", params={"path": "log.txt"}).text.split()
    assert lines == [str(i) for i in range(30)]
    proc.manager.check_invariants()


def test_incremental_checkpoints_restore_each_state(proc):
    c = proc.client
    sid = create(c)
    sh(c, sid, "head -c 4000000 /dev/urandom > big.bin; echo A > state")
    a = c.post(f"/sandboxes/{sid}/checkpoints", json={"name": "A"}).json()
    sh(c, sid, "echo B > state; echo extra > b-only")
    b = c.post(f"/sandboxes/{sid}/checkpoints", json={"name": "B"}).json()
    assert b["parent_id"] == a["id"] and a["memory"] is False
    assert a["bytes_stored"] > 4_000_000
    assert b["bytes_stored"] < 20_000, "B stores only what changed since A"
    sh(c, sid, "echo C > state; rm big.bin")

    r = c.post(f"/sandboxes/{sid}/restore", json={"checkpoint_id": a["id"]})
    assert r.status_code == 200 and r.json()["head_checkpoint_id"] == a["id"]
    assert sh(c, sid, "cat state; ls b-only 2>&1 | grep -c 'No such'; wc -c < big.bin")[
        "stdout"
    ].split() == ["A", "1", "4000000"]
    c.post(f"/sandboxes/{sid}/restore", json={"checkpointID": b["id"]})
    assert sh(c, sid, "cat state b-only")["stdout"] == "B\nextra\n"

    lineage = c.get(f"/checkpoints/{b['id']}/lineage").json()
    assert [x["id"] for x in lineage] == [a["id"], b["id"]]
    assert [x["name"] for x in c.get(f"/sandboxes/{sid}/checkpoints").json()] == ["A", "B"]


def test_fork_files_only_on_process_and_memory_fork_is_409(proc):
    c = proc.client
    sid = create(c)
    sh(c, sid, "echo parent > who")
    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 2})
    assert r.status_code == 409
    assert "process" in r.json()["message"] and r.json()["error_code"] == "unsupported"

    r = c.post(f"/sandboxes/{sid}/fork", json={"count": 3, "memory": False})
    assert r.status_code == 201, r.text
    results = r.json()
    assert len(results) == 3
    assert all((x["sandbox"] is None) != (x["error"] is None) for x in results)
    kids = [x["sandbox"]["sandboxID"] for x in results]
    for i, kid in enumerate(kids):
        assert sh(c, kid, "cat who")["stdout"] == "parent\n"
        sh(c, kid, f"echo child{i} > who")
    assert [sh(c, k, "cat who")["stdout"] for k in kids] == ["child0\n", "child1\n", "child2\n"]
    assert sh(c, sid, "cat who")["stdout"] == "parent\n"
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "running"
    fork_ck = c.get(f"/sandboxes/{kids[0]}").json()["forked_from"]
    assert c.get(f"/checkpoints/{fork_ck}").json()["kind"] == "fork"


def test_restart_keeps_paused_sandbox_and_checkpoints(proc):
    c = proc.client
    sid = create(c)
    sh(c, sid, "echo kept > f")
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    c = proc.restart()
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "paused"
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert sh(c, sid, "cat f")["stdout"] == "kept\n"
    assert len(c.get(f"/sandboxes/{sid}/checkpoints").json()) == 1


def test_restart_adopts_running_sandbox(service):
    svc = service("process", on_shutdown="keep")
    c = svc.client
    sid = create(c)
    sh(c, sid, "echo live > f")
    c = svc.restart()
    assert c.get(f"/sandboxes/{sid}").json()["state"] == "running"
    assert sh(c, sid, "cat f")["stdout"] == "live\n"


def test_shutdown_pauses_running_sandboxes_by_default(proc):
    c = proc.client
    sid = create(c)
    sh(c, sid, "echo before-shutdown > f")
    c = proc.restart()
    detail = c.get(f"/sandboxes/{sid}").json()
    assert detail["state"] == "paused"
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert sh(c, sid, "cat f")["stdout"] == "before-shutdown\n"


def test_bad_input(proc):
    c = proc.client
    r = c.get("/sandboxes/sbx-nope")
    assert r.status_code == 404 and r.json()["error_code"] == "not_found"
    assert c.post("/sandboxes/sbx-nope/exec", json={"cmd": "true"}).status_code == 404
    assert c.post("/sandboxes", json={"templateID": "no-such"}).status_code == 404

    sid = create(c)
    for bad in ("/../etc/passwd", "../../../etc", "a/../../../../x"):
        r = c.get(f"/sandboxes/{sid}/files", params={"path": bad})
        assert r.status_code == 400 and "escapes" in r.json()["message"], bad
        r = c.put(f"/sandboxes/{sid}/files", params={"path": bad}, content=b"x")
        assert r.status_code == 400, bad
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "/nope"}).status_code == 404
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "true", "argv": ["true"]})
    assert r.status_code == 400 and "exactly one" in r.json()["message"]

    # A symlink pointing out of the guest stays inside it.
    sh(c, sid, "ln -s /../../../../etc/hostname esc")
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "esc"}).content == b"sandbox\n"

    limit = proc.settings.sandbox.max_upload_bytes
    r = c.put(f"/sandboxes/{sid}/files", params={"path": "big"}, content=b"x" * (limit + 1))
    assert r.status_code == 413 and r.json()["error_code"] == "too_large"

    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "echo hi"})
    assert (
        r.status_code == 409 and "paused" in r.json()["message"] and "resume" in r.json()["message"]
    )
    assert c.get(f"/sandboxes/{sid}/files", params={"path": "x"}).status_code == 409
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 409
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 201
    assert c.post(f"/sandboxes/{sid}/resume").status_code == 409


def test_unbounded_numbers_are_4xx_never_5xx(proc):
    c = proc.client
    sid = create(c)
    huge = 1e30
    cases = [
        ("post", f"/sandboxes/{sid}/timeout", {"json": {"timeout": huge}}),
        ("post", f"/sandboxes/{sid}/connect", {"json": {"timeout": huge}}),
        (
            "post",
            f"/sandboxes/{sid}/fork",
            {"json": {"count": 1, "timeout": huge, "memory": False}},
        ),
        ("post", f"/sandboxes/{sid}/fork", {"json": {"count": 10**12, "memory": False}}),
        ("post", f"/sandboxes/{sid}/resume", {"json": {"timeout": huge}}),
        ("post", f"/sandboxes/{sid}/exec", {"json": {"cmd": "true", "timeout_s": 1e18}}),
        ("post", f"/sandboxes/{sid}/exec", {"json": {"cmd": "true", "timeout_s": 10**6}}),
        ("post", "/gc", {"params": {"grace_s": "1e400"}}),
        ("post", "/gc", {"params": {"grace_s": "nan"}}),
        ("post", "/sandboxes", {"json": {"timeout": huge}}),
        ("get", f"/sandboxes/{sid}/ports/99999999999", {}),
    ]
    for method, url, kw in cases:
        r = getattr(c, method)(url, **kw)
        assert 400 <= r.status_code < 500, (url, kw, r.status_code, r.text)
        assert r.json()["message"], (url, r.text)
    assert sh(c, sid, "echo still fine")["stdout"] == "still fine\n"


def test_guest_calls_have_their_own_bounded_pool(service):
    """Exec calls that hang on their guests fill only their own pool: the next one gets 429
    at once, every other route keeps answering."""
    import threading

    svc = service("process", guest_call_limit=2)
    c = svc.client
    sid = create(c)
    results: list[tuple[int, int | None]] = []

    def hang() -> None:
        cmd = "while [ ! -e /home/user/go ]; do sleep 0.05; done"
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd, "timeout_s": 600})
        results.append((r.status_code, r.json().get("exit_code")))

    threads = [threading.Thread(target=hang) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        calls = c.app.state.guest_calls  # type: ignore[attr-defined]
        eventually(lambda: calls.in_flight["*"], lambda n: n == 2, what="both calls in flight")
        r = c.post(f"/sandboxes/{sid}/exec", json={"cmd": "true"})
        assert r.status_code == 429, r.text
        assert "GUEST_CALL_LIMIT" in r.json()["message"]
        assert c.get("/sandboxes").status_code == 200  # lifecycle and listing unaffected
        assert c.get(f"/sandboxes/{sid}").status_code == 200
        assert c.get("/health").status_code == 200
    finally:
        # release the hung calls behind the API's back (every API guest call would get 429)
        svc.manager.runtimes["process"].write_file(
            svc.manager.live_handle(sid), "/home/user/go", b"1"
        )
        for t in threads:
            t.join(300)
    assert results == [(200, 0), (200, 0)]
    assert sh(c, sid, "echo free again")["stdout"] == "free again\n"


@pytest.mark.parametrize("sse", [False, True], ids=["ndjson", "sse"])
def test_streaming_exec(proc, sse):
    c = proc.client
    sid = create(c)
    headers = {"accept": "text/event-stream"} if sse else {}
    with c.stream("POST", f"/sandboxes/{sid}/exec/stream", headers=headers,
                  json={"cmd": "echo one; echo two >&2; exit 3"}) as r:  # fmt: skip
        assert r.status_code == 200
        body = r.read().decode()
    if sse:
        events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    else:
        events = [json.loads(line) for line in body.splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "exit" and events[-1]["exit_code"] == 3
    assert "".join(e["data"] for e in events if e["kind"] == "stdout") == "one\n"
    assert "".join(e["data"] for e in events if e["kind"] == "stderr") == "two\n"


def test_exec_timeout_stdin_background_and_signal(proc):
    c = proc.client
    sid = create(c)
    out = sh(c, sid, "sleep 10", timeout=0.3)
    assert out["timed_out"] is True and out["exit_code"] is None
    assert sh(c, sid, "cat", stdin="piped")["stdout"] == "piped"
    bg = sh(c, sid, "echo started; sleep 300", background=True)
    pid = bg["pid"]
    assert pid and sh(c, sid, f"kill -0 {pid} && echo alive")["stdout"] == "alive\n"
    assert c.post(f"/sandboxes/{sid}/processes/{pid}/signal", json={"signal": 9}).status_code == 204
    assert sh(c, sid, f"sleep 0.1; kill -0 {pid} 2>/dev/null || echo gone")["stdout"] == "gone\n"
    assert (
        c.get(f"/sandboxes/{sid}/files", params={"path": f"/tmp/.k3s/bg-{pid}.out"}).text
        == "started\n"
    )


def test_timeout_pauses_or_kills(proc):
    from datetime import timedelta

    c = proc.client
    m = proc.manager
    keep = create(c, timeout=30)
    gone = create(c, timeout=30, autoPause=False)
    base = m.clock()
    m.clock = lambda: base + timedelta(seconds=31)
    done = m.tick()
    assert done["paused"] == [keep] and done["killed"] == [gone]
    assert c.get(f"/sandboxes/{keep}").json()["state"] == "paused"
    assert c.get(f"/sandboxes/{gone}").status_code == 404
    m.check_invariants()


def test_periodic_snapshots(service):
    from datetime import timedelta

    svc = service("process", snapshot_interval_s=60)
    c, m = svc.client, svc.manager
    sid = create(c)
    sh(c, sid, "echo 1 > f")
    base = m.clock()
    m.clock = lambda: base + timedelta(seconds=61)
    assert m.tick()["snapshots"] == [sid]
    assert m.tick()["snapshots"] == []
    cks = c.get(f"/sandboxes/{sid}/checkpoints").json()
    assert [x["kind"] for x in cks] == ["periodic"]


def test_crashed_sandbox_recovers_from_its_last_checkpoint(proc):
    import os
    import signal

    c, m = proc.client, proc.manager
    sid = create(c)
    sh(c, sid, "echo saved > f")
    c.post(f"/sandboxes/{sid}/checkpoints")
    sh(c, sid, "echo lost > f")
    handle = m.live_handle(sid)
    os.kill(handle.pid, signal.SIGKILL)
    rt = m.runtimes["process"]
    eventually(lambda: not rt.is_alive(handle), what="the sandbox's process gone")
    assert m.tick()["lost"] == [sid]
    d = c.get(f"/sandboxes/{sid}").json()
    assert d["state"] == "paused" and "exited unexpectedly" in d["error"]
    c.post(f"/sandboxes/{sid}/resume")
    assert sh(c, sid, "cat f")["stdout"] == "saved\n"


def test_list_connect_timeout_refresh(proc):
    c = proc.client
    a = create(c, metadata={"team": "x"})
    b = create(c, metadata={"team": "y"})
    c.post(f"/sandboxes/{b}/pause")
    ids = {s["sandboxID"]: s["state"] for s in c.get("/sandboxes").json()}
    assert ids == {a: "running", b: "paused"}
    assert [s["sandboxID"] for s in c.get("/sandboxes", params={"metadata": "team=x"}).json()] == [
        a
    ]
    assert [s["sandboxID"] for s in c.get("/v2/sandboxes", params={"state": "paused"}).json()] == [
        b
    ]
    assert c.post(f"/sandboxes/{a}/connect", json={"timeout": 60}).status_code == 200
    assert c.post(f"/sandboxes/{b}/connect", json={"timeout": 60}).status_code == 201
    assert c.post(f"/sandboxes/{a}/timeout", json={"timeout": 120}).status_code == 204
    assert c.get(f"/sandboxes/{a}").json()["timeout_s"] == 120
    assert c.post(f"/sandboxes/{a}/refreshes", json={"duration": 10}).status_code == 204


def test_templates_build_list_use_delete(proc):
    c = proc.client
    r = c.post("/templates", json={"name": "with-tool", "steps": [
        {"type": "RUN", "args": ["mkdir -p /opt/tool && echo v1 > /opt/tool/VERSION"]},
        {"type": "ENV", "args": ["TOOL_HOME", "/opt/tool"]},
    ]})  # fmt: skip
    assert r.status_code == 202, r.text
    t = eventually(
        lambda: c.get("/templates/with-tool").json(), lambda t: t["buildStatus"] != "building",
        what="the template build to end",
    )  # fmt: skip
    assert t["buildStatus"] == "ready", t
    assert {x["templateID"] for x in c.get("/templates").json()} >= {
        "busybox",
        "debian",
        "with-tool",
    }
    sid = create(c, templateID="with-tool")
    assert sh(c, sid, "cat $TOOL_HOME/VERSION")["stdout"] == "v1\n"
    assert c.delete("/templates/with-tool").status_code == 409  # in use
    c.delete(f"/sandboxes/{sid}")
    assert c.delete("/templates/with-tool").status_code == 204
    assert c.delete("/templates/busybox").status_code == 409

    r = c.post(
        "/templates", json={"name": "broken", "steps": [{"type": "RUN", "args": ["exit 4"]}]}
    )
    t = eventually(
        lambda: c.get("/templates/broken").json(), lambda t: t["buildStatus"] != "building",
        what="the template build to end",
    )  # fmt: skip
    assert t["buildStatus"] == "error" and "exited 4" in t["error"]
    assert c.post("/sandboxes", json={"templateID": "broken"}).status_code == 409


def test_guest_port_reachable_from_host(proc):
    """``GET /sandboxes/{id}/ports/{port}`` on the process runtime: the sandbox has its own
    network namespace, the forwarder connects inside it."""
    import httpx

    c = proc.client
    sid = create(c)
    sh(c, sid, "mkdir -p www && echo proc-page > www/index.html")
    sh(c, sid, "busybox httpd -f -p 8000 -h /home/user/www", background=True)
    r = c.get(f"/sandboxes/{sid}/ports/8000")
    assert r.status_code == 200, r.text
    host = r.json()["host"]

    def get() -> str:
        try:
            return httpx.get(f"http://{host}/index.html", timeout=10).text
        except httpx.HTTPError:
            return ""

    assert eventually(get, what="the guest page") == "proc-page\n"
    assert c.get(f"/sandboxes/{sid}/ports/0").status_code == 400
    assert c.post(f"/sandboxes/{sid}/pause").status_code == 204
    assert c.get(f"/sandboxes/{sid}/ports/8000").status_code == 409
    with pytest.raises(httpx.HTTPError):  # the forward ended with the sandbox's processes
        httpx.get(f"http://{host}/index.html", timeout=10)


def test_checkpoints_while_a_foreground_exec_runs_do_not_stall_it(proc):
    """Checkpoints freeze the sandbox's processes; a foreground exec running meanwhile goes on
    and ends when its command does (it used to stay stuck until its time limit: its ``nsenter``
    saw its child stopped after the thaw and stopped itself for good)."""
    import threading
    import time

    c = proc.client
    sid = create(c)
    result: dict[str, object] = {}

    def run() -> None:
        cmd = "touch /home/user/started; sleep 2; echo done"
        result["r"] = c.post(f"/sandboxes/{sid}/exec", json={"cmd": cmd, "timeout_s": 120}).json()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    eventually(
        lambda: c.get(f"/sandboxes/{sid}/files/stat", params={"path": "/home/user/started"}),
        lambda r: r.status_code == 200, what="the exec started",
    )  # fmt: skip
    taken = 0
    deadline = time.monotonic() + 60
    while t.is_alive() and time.monotonic() < deadline:  # every checkpoint is a chance to stall
        r = c.post(f"/sandboxes/{sid}/checkpoints", json={})
        assert r.status_code == 201, r.text
        taken += 1
    t.join(60)
    assert not t.is_alive(), f"the exec did not end within 60 s of {taken} checkpoints"
    assert taken >= 1
    out = result["r"]
    assert out["exit_code"] == 0 and not out["timed_out"] and out["stdout"] == "done\n", out  # type: ignore[index]


def test_allowlist_egress_and_read_only_host_folder(service, tmp_path, http_servers):
    """Network mode ``allowlist`` on the process runtime: the guest reaches each allowed host
    port at its guest address and nothing else on the host; a folder of ``process_ro_binds``
    (the agent CLIs' cache, for installed-agent episodes) is visible read-only at its path."""
    shared_dir = tmp_path / "shared-ro"
    shared_dir.mkdir()
    (shared_dir / "tool.txt").write_text("from the host\n")
    c = service("process", process_ro_binds=[str(shared_dir)]).client
    allowed, other = http_servers
    dest = f"127.0.0.1:{allowed}"
    sid = create(c, network={"mode": "allowlist", "allow": [dest]})
    guest = c.get(f"/sandboxes/{sid}").json()["guest_addresses"][dest]
    assert guest == f"127.0.0.100:{allowed}"
    fetch = (
        "python3 -c 'import sys, urllib.request as u; "
        'print(u.urlopen(sys.argv[1], timeout=10).read().decode(), end="")\''
    )
    got = sh(c, sid, f"{fetch} http://{guest}/hello")
    assert got["stdout"] == f"hello from {allowed}\n", got
    refused = sh(c, sid, f"{fetch} http://127.0.0.1:{other}/")
    assert refused["exit_code"] != 0 and "hello" not in refused["stdout"], refused
    seen = sh(c, sid, f"cat {shared_dir}/tool.txt; echo x > {shared_dir}/new.txt")
    assert seen["stdout"] == "from the host\n" and seen["exit_code"] != 0, seen
    assert "Read-only" in seen["stderr"], seen
    assert not (shared_dir / "new.txt").exists()
    assert c.delete(f"/sandboxes/{sid}").status_code == 204
