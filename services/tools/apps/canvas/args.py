"""A Canvas call's arguments and its paging: query string, form body or JSON, with Rails'
bracket names (``submission[submission_type]``, ``context_codes[]``) read into nested values;
lists page with ``page`` / ``per_page`` and a ``Link`` header ``canvasapi`` follows."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from services.tools.apps.canvas.actions import CanvasError

PER_PAGE, MAX_PER_PAGE = 10, 100
MAX_KEY_DEPTH = (
    32  # ``a[b][c]...``: deeper is a 400, as a deep JSON body is (services/tools/bounds.py)
)
_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Store ``a[b][]=v`` as ``{"a": {"b": [v]}}`` (Rails' parameter nesting)."""
    m = _KEY.match(key)
    if m is None:
        raise CanvasError(400, f"unreadable parameter name {key!r}")
    parts = [m.group(1), *re.findall(r"\[([^\[\]]*)\]", m.group(2))]
    if len(parts) > MAX_KEY_DEPTH:
        raise CanvasError(400, f"parameter {key[:40]!r}... nests more than {MAX_KEY_DEPTH} levels")
    node: Any = out
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt_is_list = not last and parts[i + 1] == ""
        if part == "":
            if not isinstance(node, list):
                raise CanvasError(400, f"parameter {key!r} mixes a list and an object")
            if last:
                node.append(value)
                return
            raise CanvasError(400, f"parameter {key!r}: nesting under [] is not supported")
        if not isinstance(node, dict):
            raise CanvasError(400, f"parameter {key!r} mixes a list and an object")
        if last:
            node[part] = value
        else:
            node = node.setdefault(part, [] if nxt_is_list else {})


class Args:
    """A call's arguments, merged from the query string and the body."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def get(self, *path: str, default: Any = None) -> Any:
        node: Any = self.values
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return default
            node = node[p]
        return node

    def text(self, *path: str, required: bool = False) -> str | None:
        value = self.get(*path)
        if value is None and required:
            raise CanvasError(400, f"{'['.join(path)}{']' * (len(path) - 1)} is required")
        if value is not None and not isinstance(value, str | int | float):
            raise CanvasError(400, f"{path[-1]} must be a string")
        return None if value is None else str(value)

    def strings(self, *path: str) -> list[str]:
        value = self.get(*path)
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str | int) for v in items):
            raise CanvasError(400, f"{path[-1]} must be a list of strings")
        return [str(v) for v in items]

    def flag(self, *path: str) -> bool:
        value = self.get(*path)
        return value is True or str(value).lower() in ("1", "true", "yes", "on")

    def number(self, *path: str, default: float) -> float:
        value = self.get(*path)
        if value in (None, ""):
            return default
        try:
            return float(value)
        except (TypeError, ValueError):
            raise CanvasError(400, f"{path[-1]} must be a number") from None


async def canvas_args(request: Request) -> Args:
    values: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        _put(values, key, value)
    raw = await request.body()
    if raw.strip():
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                body = json.loads(raw)
            except ValueError:
                raise CanvasError(400, "the body is not valid JSON") from None
            if not isinstance(body, dict):
                raise CanvasError(400, "the JSON body must be an object")
            values.update(body)
        elif ctype in ("application/x-www-form-urlencoded", ""):
            for key, value in parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True):
                _put(values, key, value)
        else:
            raise CanvasError(415, f"unsupported content type {ctype!r}: send form or JSON")
    return Args(values)


Params = Annotated[Args, Depends(canvas_args)]


def paged(request: Request, args: Args, items: list[dict[str, Any]]) -> JSONResponse:
    """One page of ``items`` with Canvas's ``Link`` header."""
    try:
        page = int(args.get("page", default=1))
        per_page = int(args.get("per_page", default=PER_PAGE))
    except (TypeError, ValueError):
        raise CanvasError(400, "page and per_page must be integers") from None
    if page < 1 or per_page < 1:
        raise CanvasError(400, "page and per_page must be at least 1")
    per_page = min(per_page, MAX_PER_PAGE)
    last = max(1, -(-len(items) // per_page))
    links = {"current": page, "first": 1, "last": last}
    if page < last:
        links["next"] = page + 1
    if page > 1:
        links["prev"] = page - 1
    header = ",".join(
        f'<{request.url.include_query_params(page=n, per_page=per_page)}>; rel="{rel}"'
        for rel, n in links.items()
    )
    body = items[(page - 1) * per_page : page * per_page]
    return JSONResponse(body, headers={"Link": header})
