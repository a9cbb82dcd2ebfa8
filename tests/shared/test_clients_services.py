"""The typed clients against the real services over real HTTP: every call returns the
service's wire model, and a call that waits on work gets its own timeout — a sandbox exec
longer than the global HTTP timeout returns its result instead of "unreachable"."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from shared.clients import (
    AsyncSandboxClient,
    AsyncToolsClient,
    Call,
    SandboxClient,
    ServiceError,
    ToolsClient,
)
from shared.contracts import sandbox as sb
from shared.contracts import tools as tl
from shared.settings import load_settings
from tests.helpers.asgi import serve


@pytest.fixture
def sandbox_url(tmp_path: Path):
    from services.sandbox.app import create_app
    from services.sandbox.runtime.process import ProcessRuntime

    ok, why = ProcessRuntime(Path("/nonexistent")).available()
    if not ok:
        pytest.fail(f"the process runtime cannot run here: {why}")
    settings = load_settings(
        data_dir=tmp_path, sandbox={"runtime": "process", "reaper_interval_s": 3600}
    )
    with serve(create_app(settings, background=False)) as url:
        yield url


@pytest.fixture
def tools_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from services.tools.app import create_app
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("K3STACK_DATABASE_URL", raising=False)
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
    get_settings.cache_clear()
    try:
        with serve(create_app()) as url:
            yield url
    finally:
        get_settings.cache_clear()


def test_exec_longer_than_the_global_timeout_returns_its_result(sandbox_url):
    with SandboxClient(sandbox_url) as setup:  # create and kill on the usual timeout
        sid = setup.create("busybox", timeout=0).sandboxID
        try:
            short = load_settings(http_timeout_s=1.0, sandbox={"url": sandbox_url})
            with SandboxClient.from_settings(short, retries=0) as client:
                assert client.timeout == 1.0  # K3STACK_HTTP_TIMEOUT_S, the global timeout
                out = client.exec(sid, "sleep 3; echo done", timeout=30)
                assert isinstance(out, sb.ExecOutput)
                assert (out.exit_code, out.stdout, out.timed_out) == (0, "done\n", False)
                # the same request on the client's own 1 s timeout gives up
                body = {"cmd": "sleep 3", "timeout_s": 30}
                with pytest.raises(ServiceError) as err:
                    client.send(Call("POST", f"/sandboxes/{sid}/exec", sb.ExecOutput, json=body))
                assert (err.value.status, err.value.error_code) == (0, "timeout")
        finally:
            setup.kill(sid)


def test_sandbox_client_round_trip_is_typed(sandbox_url):
    with SandboxClient(sandbox_url, retries=0) as client:
        created = client.create("busybox", timeout=0)
        assert isinstance(created, sb.Sandbox) and created.state == "running"
        assert isinstance(client.get(created.sandboxID), sb.SandboxDetail)
        sid = created.sandboxID
        assert client.exec(sid, ["printf", "%s", "x y"]).stdout == "x y"
        client.write_file(sid, "a.txt", "data", mode=0o600)
        assert client.read_file(sid, "a.txt") == b"data"
        assert client.stat(sid, "a.txt").mode == 0o600
        assert "a.txt" in {e.name for e in client.list_dir(sid, ".")}
        events = list(client.exec_stream(sid, "echo streamed"))
        assert events[0].kind == "start" and events[-1].exit_code == 0
        ck = client.checkpoint(sid, "one")
        assert isinstance(ck, sb.Checkpoint)
        assert [c.id for c in client.lineage(ck.id)] == [ck.id]
        client.pause(sid)
        with pytest.raises(ServiceError) as err:
            client.exec(sid, "true")
        assert err.value.status == 409 and err.value.error_code == "sandbox_paused"
        assert client.connect(sid).state == "running"
        forks = client.fork(sid, count=2, memory=False)
        assert len(forks) == 2 and all(isinstance(f.sandbox, sb.Sandbox) for f in forks)
        assert {r.name for r in client.runtimes()} >= {"process", "microvm"}
        for f in forks:
            client.kill(f.sandbox.sandboxID)  # type: ignore[union-attr]
        client.kill(sid)
        with pytest.raises(ServiceError) as err:
            client.get(sid)
        assert err.value.status == 404


async def test_async_sandbox_client_streams_and_execs(sandbox_url):
    async with AsyncSandboxClient(sandbox_url, retries=0) as setup:
        sid = (await setup.create("busybox", timeout=0)).sandboxID
        try:
            async with AsyncSandboxClient(sandbox_url, timeout=1.0, retries=0) as client:
                out = await client.exec(sid, "sleep 2; echo late", timeout=20)
                assert out.stdout == "late\n"
            kinds = [e.kind async for e in setup.exec_stream(sid, "echo a")]
            assert kinds[0] == "start" and kinds[-1] == "exit"
        finally:
            await setup.kill(sid)


def _drive_world(client: ToolsClient) -> None:
    w = client.create_world("empty", 3)
    assert isinstance(w, tl.World) and w.token
    raw = base64.urlsafe_b64encode(b"To: bob@example.test\r\nSubject: hi\r\n\r\nhello").decode()
    sent = client.app(w.id, w.token, "POST", "gmail/v1/users/me/messages/send", json={"raw": raw})
    assert sent["id"]  # app routes answer in the app's own shape (Gmail's here)
    snap = client.snapshot(w.id, label="start")
    assert isinstance(snap, tl.Snapshot)
    advanced = client.advance(w.id, by="1h")
    assert isinstance(advanced, tl.AdvanceResult)
    assert client.clock(w.id).now == advanced.now
    client.restore(w.id, snap.id)
    state = client.state(w.id, tables=False)
    assert isinstance(state, tl.WorldState) and state.full_hash == snap.state_hash
    fork = client.fork(w.id)
    assert isinstance(client.checks(fork.id), tl.ChecksReport)
    assert isinstance(client.events(fork.id), tl.EventList)
    client.delete_world(fork.id)
    assert "hr_onboarding" in {s.name for s in client.scenarios().scenarios}


def test_tools_client_is_typed(tools_url):
    with ToolsClient(tools_url) as client:
        _drive_world(client)


async def test_async_tools_client_is_typed(tools_url):
    async with AsyncToolsClient(tools_url) as client:
        w = await client.create_world("hr_onboarding", 1)
        report = await client.checks(w.id)
        assert isinstance(report, tl.ChecksReport) and report.events_total > 0
        assert (await client.get_world(w.id)).scenario == "hr_onboarding"


async def test_async_client_in_process_through_asgi_transport(tmp_path, monkeypatch):
    """``transport=httpx.ASGITransport(app)``: the real app, no socket, no private seams."""
    import httpx

    from services.tools.app import create_app
    from shared.settings import get_settings

    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
    get_settings.cache_clear()
    app = create_app()
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with AsyncToolsClient("http://tools", transport=transport) as client:
            w = await client.create_world("empty", 5)
            assert isinstance(await client.advance(w.id, by="PT2H"), tl.AdvanceResult)
            assert (await client.health()).status == "ok"
    get_settings.cache_clear()
