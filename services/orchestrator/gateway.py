"""The recording gateway: an installed agent's model endpoint, per episode.

A real CLI is pointed at ``/episodes/{id}`` (Claude Code's ``ANTHROPIC_BASE_URL``, Codex's
provider ``base_url`` + ``/v1``); ``/v1/messages``, ``/v1/messages/count_tokens``,
``/v1/responses``, ``/v1/chat/completions`` and ``/v1/models`` are forwarded to the episode's
policy endpoint (any OpenAI- or Anthropic-compatible server) and every exchange is handed to the
episode's recorder as one trajectory step: the request, the answer (JSON, or every event of a
stream, passed through as it comes), the status, token ids and logprobs when the policy returned
them, and the latency. An output budget caps ``max_tokens`` / ``max_output_tokens`` (the
harness's ``budgets.max_output_tokens``), so a CLI asking for 32K tokens cannot outrun its day.
A CLI that goes away (it timed out, or was killed) closes the upstream request at once, waiting
for the answer's head or mid-stream, so the policy's server aborts the generation instead of
computing for nobody; the step is recorded with ``client_gone``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from shared import sse

API_PATHS = ("messages", "messages/count_tokens", "responses", "chat/completions")
_PASS_HEADERS = ("anthropic-version", "anthropic-beta", "content-type")
_BUDGET_FIELDS = {
    "messages": "max_tokens",
    "responses": "max_output_tokens",
    "chat/completions": "max_completion_tokens",
}


@dataclass
class Route:
    """Where one episode's model calls go, and who records them."""

    base_url: str  # the policy endpoint, up to and including /v1
    api_key: str | None
    record: Callable[[dict[str, Any]], None]
    max_output_tokens: int | None = None
    agent: str | None = None  # the installed agent, name/version, for the record
    steps: int = field(default=0)
    # a local engine instead of an endpoint (the oracle): (api, body) -> (status, JSON | events)
    answer: Callable[[str, dict[str, Any]], tuple[int, Any, dict[str, Any]]] | None = None


class Routes:
    """The live episodes' routes; an unknown episode is a 404 (never forwarded)."""

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}

    def add(self, episode_id: str, route: Route) -> None:
        self._routes[episode_id] = route

    def remove(self, episode_id: str) -> None:
        self._routes.pop(episode_id, None)

    def get(self, episode_id: str) -> Route | None:
        return self._routes.get(episode_id)


def _capped(api: str, body: Any, cap: int | None) -> Any:
    key = _BUDGET_FIELDS.get(api)
    if cap is None or key is None or not isinstance(body, dict):
        return body
    if api == "chat/completions" and "max_tokens" in body and key not in body:
        key = "max_tokens"
    asked = body.get(key)
    if not isinstance(asked, int) or asked > cap:
        return {**body, key: cap}
    return body


def _events(raw: bytes) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded where they are JSON."""
    out: list[Any] = []
    for e in sse.parse(raw):
        try:
            out.append(json.loads(e.data))
        except json.JSONDecodeError:
            out.append(e.data)
    return out


class _ClientGone(Exception):
    """The CLI disconnected before its answer was complete."""


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(watcher: asyncio.Future[None], work: Any) -> Any:
    """Await ``work``, cancelling it (which closes its connection) once ``watcher`` saw the
    client go."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this await itself is cancelled (the server saw the client go)
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise _ClientGone
    return task.result()


async def _next_chunk(chunks: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


def gateway_router(routes: Routes, transport: httpx.AsyncBaseTransport | None = None) -> APIRouter:
    router = APIRouter(tags=["gateway"])

    def _route(episode_id: str) -> Route:
        route = routes.get(episode_id)
        if route is None:
            raise _NoRoute(episode_id)
        return route

    def _headers(request: Request, route: Route) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASS_HEADERS}
        if route.api_key:
            headers["authorization"] = f"Bearer {route.api_key}"
            headers["x-api-key"] = route.api_key
        return headers

    @router.get("/episodes/{episode_id}/v1/models", operation_id="gatewayModels")
    async def models(episode_id: str) -> Response:
        route = _route(episode_id)
        if route.answer is not None:  # a local engine (the oracle) answers any model name
            model = {"id": "oracle", "object": "model", "created": 0, "owned_by": "k3stack"}
            return JSONResponse({"object": "list", "data": [model]})
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            r = await client.get(route.base_url.rstrip("/") + "/models")
        return Response(r.content, r.status_code, media_type="application/json")

    async def forward(episode_id: str, api: str, request: Request) -> Response:
        route = _route(episode_id)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            return JSONResponse({"error": {"message": "body: not JSON"}}, 400)
        sent = _capped(api, body, route.max_output_tokens)
        url = route.base_url.rstrip("/") + "/" + api
        started = time.monotonic()
        step: dict[str, Any] = {
            "api": api, "request": sent, "agent": route.agent,
            "client_headers": {k: v for k, v in request.headers.items() if k.lower() in (
                "user-agent", "anthropic-beta", "anthropic-version", "originator")},
        }  # fmt: skip
        route.steps += 1
        if route.answer is not None:
            return _local(route, api, sent, step, started)
        client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(600, connect=10))
        upstream = client.build_request("POST", url, json=sent, headers=_headers(request, route))
        watcher = asyncio.ensure_future(_disconnected(request))

        def gone() -> Response:
            step.update(status=499, client_gone=True, latency_s=time.monotonic() - started)
            route.record(step)
            return Response(status_code=499)

        try:
            r = await _unless_gone(watcher, client.send(upstream, stream=True))
        except _ClientGone:
            await client.aclose()
            return gone()
        except httpx.HTTPError as exc:
            watcher.cancel()
            await client.aclose()
            step.update(status=502, error=str(exc), latency_s=time.monotonic() - started)
            route.record(step)
            return JSONResponse({"error": {"message": f"policy endpoint: {exc}"}}, 502)
        kind = r.headers.get("content-type", "")
        passed = {
            k: v
            for k, v in r.headers.items()
            if k.lower() in ("warning", "x-k3stack-ignored-fields")
        }

        if "text/event-stream" not in kind:
            try:
                content = await _unless_gone(watcher, r.aread())
            except _ClientGone:
                return gone()
            finally:
                watcher.cancel()
                await r.aclose()
                await client.aclose()
            try:
                answer: Any = json.loads(content)
            except json.JSONDecodeError:
                answer = content.decode("utf-8", "replace")
            step.update(status=r.status_code, response=answer, headers=passed,
                        latency_s=time.monotonic() - started)  # fmt: skip
            route.record(step)
            return Response(content, r.status_code, media_type=kind or None, headers=passed)

        async def relay() -> AsyncIterator[bytes]:
            seen, chunks, finished = bytearray(), r.aiter_raw(), False
            try:
                while (chunk := await _unless_gone(watcher, _next_chunk(chunks))) is not None:
                    seen += chunk
                    yield chunk
                finished = True
            except _ClientGone:
                pass
            finally:  # left early: the client went (seen here, or by the server: cancelled)
                step["client_gone"] = not finished
                watcher.cancel()
                await r.aclose()
                await client.aclose()
                step.update(status=r.status_code, events=_events(bytes(seen)), headers=passed,
                            latency_s=time.monotonic() - started)  # fmt: skip
                route.record(step)

        return StreamingResponse(relay(), r.status_code, media_type=kind, headers=passed)

    for api in API_PATHS:
        router.add_api_route(
            f"/episodes/{{episode_id}}/v1/{api}",
            _endpoint(forward, api),
            methods=["POST"],
            operation_id="gateway_" + api.replace("/", "_"),
        )
    return router


def _local(route: Route, api: str, body: Any, step: dict[str, Any], started: float) -> Response:
    """The route's own engine answers: JSON, or its events as a server-sent stream."""
    assert route.answer is not None
    status, answer, note = route.answer(api, body if isinstance(body, dict) else {})
    step.update(status=status, latency_s=time.monotonic() - started, headers={}, **note)
    if isinstance(answer, list):
        step["events"] = answer
        route.record(step)
        text = "".join(sse.json_event(e, e.get("type")) for e in answer) + (
            sse.event("[DONE]") if api == "chat/completions" else ""
        )
        return Response(text, status, media_type="text/event-stream")
    step["response"] = answer
    route.record(step)
    return JSONResponse(answer, status)


def _endpoint(forward: Any, api: str) -> Any:
    async def endpoint(episode_id: str, request: Request) -> Response:
        return await forward(episode_id, api, request)

    endpoint.__name__ = "gateway_" + api.replace("/", "_")
    endpoint.__doc__ = f"Forward ``/v1/{api}`` to the episode's policy endpoint, recorded."
    return endpoint


class _NoRoute(Exception):
    def __init__(self, episode_id: str) -> None:
        super().__init__(episode_id)
        self.episode_id = episode_id


def gateway_app(routes: Routes, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The gateway alone (tests, and an episode's worker, serve it on a loopback port)."""
    app = FastAPI(title="k3stack agent gateway")
    app.include_router(gateway_router(routes, transport))

    @app.exception_handler(_NoRoute)
    async def _unknown(_: Request, exc: _NoRoute) -> JSONResponse:
        return JSONResponse(
            {
                "error": {
                    "type": "not_found_error",
                    "message": f"no live episode {exc.episode_id!r}",
                }
            },
            404,
        )

    return app


@contextmanager
def serving(routes: Routes) -> Iterator[str]:
    """The gateway on a free loopback port in this process (an installed episode's worker runs
    its own); yields its base URL."""
    import threading

    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(gateway_app(routes), host="127.0.0.1", port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
