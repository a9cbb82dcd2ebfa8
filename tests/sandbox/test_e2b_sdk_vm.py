"""The unmodified ``e2b`` SDK from PyPI against the sandbox service on each runtime: a real
microVM (marker ``vm``), the ``process`` runtime and a ``docker`` container: control plane (v2 create/list/connect, timeout, pause, kill) and the envd
data plane (commands with streaming callbacks and background commands, files write/read/list),
reached the way the SDK's self-hosting settings direct it (``api_url`` and ``sandbox_url`` both
at the service; ``E2b-Sandbox-Id`` names the sandbox on every data-plane request).
"""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.sandbox.test_docker_runtime import _remove_checkpoint_images
from tests.sandbox.test_fair_dataplane import RUNTIMES, runtime_ready

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=RUNTIMES)
def service_url(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    import uvicorn

    from services.sandbox.app import create_app
    from shared.settings import load_settings
    from tests.helpers.servers import free_port, wait_for_port

    runtime_ready(request.param)
    port = free_port()
    settings = load_settings(
        data_dir=tmp_path_factory.mktemp("e2b"),
        sandbox={"runtime": request.param, "reaper_interval_s": 3600, "default_timeout_s": 0},
    )
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_config=None, access_log=False))  # fmt: skip
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    wait_for_port(port, timeout=120)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    t.join(120)


def test_stock_sdk_drives_a_sandbox(service_url):  # type: ignore[no-untyped-def]
    from e2b import Sandbox

    opts = {"api_key": "e2b_unused", "api_url": service_url, "sandbox_url": service_url}
    sbx = Sandbox.create(template="busybox", timeout=600, metadata={"suite": "e2b"},
                         envs={"GREETING": "from envs"}, **opts)  # fmt: skip
    try:
        assert sbx.commands.run("echo $GREETING").stdout == "from envs\n"  # envs reach a VM
        r = sbx.commands.run("echo hello; echo oops >&2")
        assert (r.exit_code, r.stdout, r.stderr) == (0, "hello\n", "oops\n")
        seen: list[str] = []
        r = sbx.commands.run("for i in 1 2 3; do echo line$i; done", on_stdout=seen.append)
        assert "".join(seen) == "line1\nline2\nline3\n" and r.stdout == "".join(seen)
        bg = sbx.commands.run("sleep 1; echo late", background=True)
        assert bg.pid
        assert bg.wait().stdout == "late\n"

        sbx.files.write("/home/user/notes/a.txt", "written by the SDK")
        assert sbx.files.read("/home/user/notes/a.txt") == "written by the SDK"
        names = [e.name for e in sbx.files.list("/home/user/notes")]
        assert names == ["a.txt"]

        sbx.set_timeout(900)
        listed = {s.sandbox_id: s for s in Sandbox.list(**opts).next_items()}
        assert sbx.sandbox_id in listed and listed[sbx.sandbox_id].metadata == {"suite": "e2b"}
        info = sbx.get_info()
        assert info.state.value == "running"

        sbx.pause()
        listed = {s.sandbox_id: s for s in Sandbox.list(**opts).next_items()}
        assert listed[sbx.sandbox_id].state.value == "paused"  # endAt is never null
        again = Sandbox.connect(sbx.sandbox_id, **opts)  # resumes
        assert again.commands.run("cat /home/user/notes/a.txt").stdout == "written by the SDK"
    finally:
        cks = httpx.get(f"{service_url}/sandboxes/{sbx.sandbox_id}/checkpoints").json()
        assert Sandbox.kill(sbx.sandbox_id, **opts) is True
        _remove_checkpoint_images([x["id"] for x in cks])  # docker's live in the engine
    assert Sandbox.kill(sbx.sandbox_id, **opts) is False
