"""E2B's ``get_host(port)``: HTTP requests whose Host is ``<port>-<sandbox id>.<host_domain>``
are forwarded to that port in the sandbox.

The SDK builds that name from the ``domain`` the service returns with every sandbox
(``K3STACK_SANDBOX__HOST_DOMAIN``). Point a wildcard DNS name (or ``*.localhost``, or a client's
``Host`` header) at the service and the guest's web server answers through it: the service
opens the sandbox's port forward (the same one ``GET /sandboxes/{id}/ports/{port}`` gives)
and relays the request and its streamed response. Plain HTTP only (no WebSocket upgrade).

It runs before the API's own auth, so it checks its own: when auth is on a request must carry
the sandbox's ``trafficAccessToken`` in ``e2b-traffic-access-token`` (as E2B's proxy wants) or
the service's API key; anything else is refused with 401 before the sandbox is looked up. The
credential is not passed on to the guest.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import httpx
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, StreamingResponse

from services.sandbox.api.tokens import KEY_HEADER, TRAFFIC_HEADER, traffic_refusal
from services.sandbox.lifecycle.errors import SandboxError
from shared.errors import APIError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

_HOST = re.compile(r"^(\d{1,5})-([A-Za-z0-9_-]{1,64})\.(.+?)(?::\d+)?$")
_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer",
        "proxy-authorization", "proxy-connection", "content-length", TRAFFIC_HEADER,
        KEY_HEADER}  # fmt: skip


class HostForward:
    """ASGI middleware: requests for ``<port>-<id>.<domain>`` go to the guest, the rest on."""

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        match = _HOST.match(Headers(scope=scope).get("host", ""))
        domain = self.state.settings.sandbox.host_domain
        if match is None or match.group(3).lower() != domain.lower():
            await self.app(scope, receive, send)
            return
        port, sandbox_id = int(match.group(1)), match.group(2)
        refused = traffic_refusal(self.state.settings, sandbox_id, Headers(scope=scope))
        if refused is not None:
            status, code, message = refused
            await JSONResponse({"code": code, "message": message}, status)(scope, receive, send)
            return
        try:
            if not 1 <= port <= 65535:
                raise APIError(400, "invalid_request", f"port {port} is not a TCP port")
            calls, m = self.state.guest_calls, self.state.manager
            fwd = await calls.run(sandbox_id, m.expose_port, sandbox_id, port)
        except (APIError, SandboxError) as exc:
            from services.sandbox.api.errors import to_api_error

            err = to_api_error(exc) if isinstance(exc, SandboxError) else exc
            body = {"code": err.error_code, "message": err.message}
            await JSONResponse(body, err.status)(scope, receive, send)
            return
        await self._relay(fwd.host, scope, receive, send)

    @staticmethod
    async def _relay(target: str, scope: Scope, receive: Receive, send: Send) -> None:
        async def body() -> Any:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                yield msg.get("body", b"")
                if not msg.get("more_body"):
                    return

        headers = [(k, v) for k, v in Headers(scope=scope).items() if k.lower() not in _HOP]
        url = f"http://{target}{scope['path']}"
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0))
        try:
            req = client.build_request(scope["method"], url, headers=headers, content=body())
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as exc:
            await client.aclose()
            msg = {"code": "bad_gateway", "message": f"guest port unreachable: {exc}"}
            await JSONResponse(msg, 502)(scope, receive, send)
            return

        async def out() -> Any:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()
                await client.aclose()

        keep = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}
        await StreamingResponse(out(), resp.status_code, headers=keep)(scope, receive, send)
