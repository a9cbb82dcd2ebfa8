"""E2B's ``get_host(port)`` behind the service's auth (issue 36), driven by the stock ``e2b``
SDK with its defaults on each runtime (the microVM marked ``vm``): a request for
``<port>-<id>.<domain>`` reaches the guest only with that sandbox's ``trafficAccessToken`` in
``e2b-traffic-access-token`` (what E2B's docs tell a client to send) or the service's API key;
without it, with a wrong one or with another sandbox's, the answer is 401 naming the header,
and the guest never sees the credential. Before, the forwarder ran ahead of auth and let any
request through.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.sandbox.test_fair_dataplane import RUNTIMES, runtime_ready
from tests.sandbox.waiting import eventually

pytestmark = pytest.mark.timeout(600)
KEY = f"k3s-test-{secrets.token_hex(8)}"
CGI = '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n"\nenv\n'
"""A CGI script the guest's web server runs: it answers with the request's headers as seen by
the guest (``HTTP_*`` variables)."""


@pytest.fixture(params=RUNTIMES)
def url(request, tmp_path: Path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    from services.sandbox.app import create_app
    from shared.settings import load_settings
    from tests.helpers.asgi import serve

    runtime_ready(request.param)
    settings = load_settings(
        data_dir=tmp_path / "data", auth_enabled=True,
        sandbox={"runtime": request.param, "api_key": KEY, "reaper_interval_s": 3600,
                 "default_timeout_s": 0, "warm_pool": 0},
    )  # fmt: skip
    app = create_app(settings, background=False)
    with serve(app) as base:
        yield base
        for sid in app.state.manager.running_ids():
            app.state.manager.kill(sid)


def _serve_page(sbx) -> str:  # type: ignore[no-untyped-def]
    """A web server on guest port 8000 with a page and the header-echoing CGI; its host."""
    sbx.files.write("/home/user/www/index.html", "guest-page\n")
    sbx.files.write("/home/user/www/cgi-bin/env", CGI)
    sbx.commands.run("chmod 755 /home/user/www/cgi-bin/env")
    sbx.commands.run("busybox httpd -f -p 8000 -h /home/user/www", background=True)
    return sbx.get_host(8000)


def test_get_host_wants_the_sandboxs_traffic_token(url):  # type: ignore[no-untyped-def]
    from e2b import Sandbox

    opts = {"api_key": KEY, "api_url": url, "sandbox_url": url}
    sbx = Sandbox.create(template="busybox", timeout=600, **opts)  # the SDK's defaults
    other = None
    try:
        token = sbx.traffic_access_token
        assert token and token != sbx._envd_access_token
        host = _serve_page(sbx)
        assert host == f"8000-{sbx.sandbox_id}.sandbox.localhost"

        def get(path: str, **headers: str) -> httpx.Response:
            return httpx.get(f"{url}{path}", headers={"Host": host, **headers}, timeout=30)

        page = eventually(
            lambda: get("/index.html", **{"e2b-traffic-access-token": token}),
            lambda r: r.status_code == 200, timeout_s=120, what="the guest page with the token",
        )  # fmt: skip
        assert page.text == "guest-page\n"

        bare = get("/index.html")
        assert bare.status_code == 401, bare.text
        assert "e2b-traffic-access-token" in bare.json()["message"]
        wrong = get("/index.html", **{"e2b-traffic-access-token": token[:-1] + "0"})
        assert wrong.status_code == 401, wrong.text
        envd = get("/index.html", **{"e2b-traffic-access-token": sbx._envd_access_token or ""})
        assert envd.status_code == 401, "the envd token is not the traffic token"
        assert get("/index.html", **{"X-API-Key": KEY}).status_code == 200  # the API's key

        seen = get("/cgi-bin/env", **{"e2b-traffic-access-token": token, "X-API-Key": KEY})
        assert seen.status_code == 200 and "HTTP_HOST" in seen.text, seen.text
        assert token not in seen.text and KEY not in seen.text  # never passed to the guest

        other = Sandbox.create(template="busybox", timeout=600, **opts)
        theirs = f"8000-{other.sandbox_id}.sandbox.localhost"
        r = httpx.get(f"{url}/index.html", timeout=30,
                      headers={"Host": theirs, "e2b-traffic-access-token": token})  # fmt: skip
        assert r.status_code == 401, "one sandbox's token opens no other sandbox"
        r = httpx.get(f"{url}/", headers={"Host": "8000-nosuchsandbox.sandbox.localhost"})
        assert r.status_code == 401, "refused before the sandbox is looked up"
    finally:
        Sandbox.kill(sbx.sandbox_id, **opts)
        if other is not None:
            Sandbox.kill(other.sandbox_id, **opts)
