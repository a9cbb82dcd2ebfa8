"""Hostile bodies answer 4xx in every app, never a 500: JSON nested past the service's depth
limit (a calendar event's ``extendedProperties``, Slack ``blocks`` in a JSON body, a form or a
multipart field, a Notion page, Gmail, Canvas's ``a[b][c]`` keys, MCP, the management routes),
and a body over the size limit; nesting within the limit still works."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from starlette.responses import JSONResponse

from services.tools.bounds import BodyBounds, json_depth_over
from tests.tools.conftest import ToolsWorld

LIMIT = 64  # K3STACK_TOOLS__MAX_JSON_DEPTH's default
JSON = {"content-type": "application/json"}


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep, as text (a client's encoder would overflow first)."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def event(extended: str) -> str:
    return (
        '{"summary": "s", "start": {"dateTime": "2026-03-02T10:00:00Z"}, '
        '"end": {"dateTime": "2026-03-02T11:00:00Z"}, '
        f'"extendedProperties": {{"private": {extended}}}}}'
    )


def calls(w: ToolsWorld, depth: int) -> dict[str, Any]:
    """One request per road a deep document can take, each answer by name."""
    base = f"/worlds/{w.id}"
    post = w.client.post
    h = {**w.auth, **JSON}
    deep = nested(depth)
    return {
        "calendar": post(f"{base}/calendar/v3/calendars/primary/events", content=event(deep), headers=h),
        "slack json": post(
            f"{base}/slack/api/chat.postMessage",
            content=f'{{"channel": "general", "text": "x", "blocks": [{deep}]}}',
            headers=h,
        ),
        "slack form": post(
            f"{base}/slack/api/chat.postMessage",
            data={"channel": "general", "text": "x", "blocks": f"[{deep}]"},
            headers=w.auth,
        ),
        "notion": post(
            f"{base}/notion/v1/search",
            content=f'{{"query": "x", "filter": {deep}}}',
            headers={**h, "Notion-Version": "2022-06-28"},
        ),
        "gmail": post(
            f"{base}/gmail/v1/users/me/labels", content=f'{{"name": "L", "x": {deep}}}', headers=h
        ),
        "canvas": post(
            f"{base}/canvas/api/v1/courses/1/assignments",
            content=f'{{"assignment": {deep}}}',
            headers=h,
        ),
        "mcp": post(
            f"{base}/mcp",
            content=f'{{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {deep}}}',
            headers=h,
        ),
        "management": post("/worlds", content=f'{{"scenario": "empty", "x": {deep}}}', headers=JSON),
    }  # fmt: skip


@pytest.mark.parametrize("depth", [LIMIT + 1, 300, 20_000])
def test_deep_json_is_a_400_naming_the_limit_in_every_app(world: ToolsWorld, depth: int):
    for road, resp in calls(world, depth).items():
        assert resp.status_code == 400, (road, resp.status_code, resp.text[:300])
        assert f"more than {LIMIT} levels deep" in resp.text, (road, resp.text[:300])
    # Each app answers in its own shape.
    answers = calls(world, depth)
    assert answers["slack json"].json()["ok"] is False
    assert answers["calendar"].json()["error"]["code"] == 400
    assert answers["notion"].json()["object"] == "error"


def test_nesting_within_the_limit_still_works(world: ToolsWorld):
    answers = calls(world, LIMIT - 4)
    assert answers["calendar"].status_code == 200, answers["calendar"].text[:300]
    got = answers["calendar"].json()["extendedProperties"]["private"]
    depth = 0
    while got:
        got, depth = got["a"], depth + 1
    assert depth == LIMIT - 5
    assert answers["slack json"].json()["ok"] is True
    assert answers["slack form"].json()["ok"] is True


def test_slack_multipart_field_and_canvas_keys_are_bounded_where_parsed(world: ToolsWorld):
    """A multipart field and Canvas's bracketed keys never reach the body check as JSON: the
    app's own parser bounds them, in the app's error shape."""
    resp = world.client.post(
        f"/worlds/{world.id}/slack/api/chat.postMessage",
        files={"file": ("a.txt", b"x")},
        data={"channel": "general", "text": "x", "blocks": f"[{nested(300)}]"},
        headers=world.auth,
    )
    body = resp.json()
    assert body["ok"] is False and "levels deep" in str(body), body
    key = "assignment" + "[a]" * 200
    resp = world.client.get(
        f"/worlds/{world.id}/canvas/api/v1/courses", params={key: "1"}, headers=world.auth
    )
    assert resp.status_code == 400 and "nests more than" in resp.text, resp.text[:300]


def test_depth_scan_skips_strings_and_counts_only_real_nesting():
    assert json_depth_over(b'{"t": "' + b"[" * 500 + b'"}', 10) is None
    assert json_depth_over(b'{"t": "\\"' + b"{" * 500 + b'"}', 10) is None
    assert json_depth_over(b"[" * 11 + b"]" * 11, 10) == 11
    assert json_depth_over(b"[[]]" * 500, 10) is None  # many brackets, never deep


def test_body_over_the_size_limit_is_a_413_before_the_route():
    reached: list[bytes] = []
    inner = FastAPI()

    @inner.post("/x")
    async def x(request: Request) -> dict[str, int]:
        reached.append(await request.body())
        return {"n": len(reached[-1])}

    def refuse(path: str, status: int, message: str) -> JSONResponse:
        return JSONResponse({"path": path, "message": message}, status_code=status)

    app = BodyBounds(inner, max_bytes=2048, max_depth=8, refuse=refuse)
    client = TestClient(app)  # type: ignore[arg-type]
    assert client.post("/x", content=b"[1]" * 10, headers=JSON).json() == {"n": 30}
    big = client.post("/x", content=b"1" * 4096, headers=JSON)
    assert big.status_code == 413 and "2048 bytes" in big.json()["message"]

    def chunks():  # no Content-Length: refused once the read passes the limit
        for _ in range(10):
            yield b" " * 1000

    assert client.post("/x", content=chunks(), headers=JSON).status_code == 413
    assert client.post("/x", content=nested(9), headers=JSON).status_code == 400
    assert len(reached) == 1
