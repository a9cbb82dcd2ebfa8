"""Cache-aware affinity routing over model-engine replicas (report §5.4.3).

A prefix-cache miss costs orders of magnitude more than a hit, so every request of a session goes
to the replica holding its prefix: consistent hashing of the session key pins the session to a
*primary* and a pre-assigned *backup* (the next distinct replica on the ring). The backup holds
none of the session's cache and re-prefills on failover; because backups of different sessions
spread over the ring, that work spreads too. The session key is the ``x-session-id`` header,
else the body's ``user``, else the conversation's own first message after the system prompt
(agents share one system prompt across sessions; keying on it would pin them all to one replica).

Bodies over ``max_body_bytes`` get 413 (:class:`~services.model.serving.limits.BodySizeLimit`, as
the service). A client that disconnects aborts its upstream request, streaming or not: the
upstream connection is closed, which the replica reads as its client going away.

Run as a small process: ``python -m services.model.serving.router --replica URL --replica URL``.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from services.model.serving.limits import BodySizeLimit
from services.model.serving.routes import ClientGone, until_disconnect

__all__ = ["HashRing", "create_router_app", "session_key"]


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing with virtual nodes; a key maps to (primary, backup)."""

    def __init__(self, replicas: Sequence[str], vnodes: int = 64) -> None:
        if not replicas:
            raise ValueError("a router needs at least one replica")
        self.replicas = list(dict.fromkeys(replicas))
        self._ring = sorted((_point(f"{r}#{v}"), r) for r in self.replicas for v in range(vnodes))
        self._points = [p for p, _ in self._ring]

    def route(self, key: str) -> tuple[str, str | None]:
        """The key's primary and its backup (None with a single replica)."""
        i = bisect.bisect(self._points, _point(key)) % len(self._ring)
        primary = self._ring[i][1]
        for j in range(1, len(self._ring)):
            other = self._ring[(i + j) % len(self._ring)][1]
            if other != primary:
                return primary, other
        return primary, None


_SYSTEM_ROLES = ("system", "developer")


def session_key(headers: httpx.Headers | dict[str, str], body: dict) -> str:
    """``x-session-id``, else ``user``, else the conversation's first message (or input item)
    that is not the system prompt: its own stable prefix."""
    sid = headers.get("x-session-id")
    if sid:
        return sid
    if isinstance(body.get("user"), str) and body["user"]:
        return body["user"]
    if isinstance(body.get("input"), str):
        return body["input"][:2048]
    items = body.get("messages") or body.get("input") or body.get("prompt") or []
    if not isinstance(items, list):
        return json.dumps(items, sort_keys=True, default=str)[:2048]
    own = [m for m in items if not (isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES)]
    first = (own or items or [None])[0]
    return json.dumps(first, sort_keys=True, default=str)


_HOP = {"content-length", "transfer-encoding", "connection", "host", "content-encoding"}


def create_router_app(
    replicas: Sequence[str], *, timeout_s: float = 600.0, max_body_bytes: int = 8 * 1024 * 1024
) -> FastAPI:
    """A FastAPI app forwarding ``/v1/*`` to each session's replica, failing over to its backup."""
    ring = HashRing(replicas)
    client = httpx.AsyncClient(timeout=timeout_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await client.aclose()

    app = FastAPI(title="k3stack model router", lifespan=lifespan)

    async def send(target: str, request: Request, path: str, raw: bytes) -> httpx.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        req = client.build_request(
            request.method, f"{target}/v1/{path}", content=raw, headers=headers,
            params=request.query_params,
        )  # fmt: skip
        return await client.send(req, stream=True)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "replicas": ring.replicas}

    @app.api_route("/v1/{path:path}", methods=["GET", "POST"])
    async def forward(path: str, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return JSONResponse({"error": {"message": "request body is not JSON"}}, 400)
        if not isinstance(body, dict):
            return JSONResponse({"error": {"message": "request body must be a JSON object"}}, 400)
        primary, backup = ring.route(session_key(request.headers, body))
        last_error = ""
        for target in (primary, backup):
            if target is None:
                continue
            try:
                upstream = await until_disconnect(request, send(target, request, path, raw))
            except ClientGone:  # the send was cancelled, which closed the upstream connection
                return Response(status_code=499)
            except httpx.TransportError as exc:  # replica down: the backup takes over
                last_error = f"{target}: {exc!r}"
                continue
            if upstream.status_code in (502, 503, 504) and target != backup and backup:
                await upstream.aclose()
                last_error = f"{target}: HTTP {upstream.status_code}"
                continue
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
            headers["x-k3stack-replica"] = target
            return StreamingResponse(
                _relay(upstream),
                status_code=upstream.status_code,
                headers=headers,
                background=_closer(upstream),
            )
        return JSONResponse({"error": {"message": f"no replica answered ({last_error})"}}, 503)

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    return app


async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """The upstream body; closing it (the client left mid-stream) closes the upstream too."""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await upstream.aclose()


def _closer(upstream: httpx.Response):  # type: ignore[no-untyped-def]
    from starlette.background import BackgroundTask

    return BackgroundTask(upstream.aclose)


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description="Route model requests to replicas by session.")
    ap.add_argument("--replica", action="append", required=True, help="replica base URL")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8010)
    ap.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024)
    args = ap.parse_args()
    app = create_router_app(args.replica, max_body_bytes=args.max_body_bytes)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
