"""A Slack call's arguments and how each method reads them.

Slack takes a method's arguments from the query string, a form, a multipart or a JSON body
(``slack_sdk`` uses all of these); :func:`slack_params` merges them into one :class:`Params`
with typed getters. A method that only passes its arguments on to an action is declared as
:func:`call` of the action with one :class:`Arg` per keyword (checked against the action's
signature at import), so the route table reads as Slack's method list.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fastapi import Request
from starlette.datastructures import UploadFile

from services.tools.apps.slack.errors import SlackError
from services.tools.bounds import DEFAULT_DEPTH, BodyTooDeep, check_json_text, json_depth_limit
from services.tools.context import WorldContext


class Params:
    """A Slack call's arguments, merged from the query string and the body, with typed getters."""

    def __init__(
        self, values: dict[str, Any], files: dict[str, bytes], max_depth: int = DEFAULT_DEPTH
    ) -> None:
        self.values = values
        self.files = files
        self.max_depth = max_depth

    def str(self, name: str, default: str | None = None) -> str | None:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return str(value)

    def need(self, name: str, error: str = "invalid_arguments") -> str:
        value = self.str(name)
        if value is None:
            raise SlackError(error, f"missing required argument {name!r}")
        return value

    def int(self, name: str, default: int | None = None) -> int | None:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SlackError("invalid_arguments", f"{name} must be an integer") from None

    def bool(self, name: str, default: bool = False) -> bool:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("1", "true", "yes", "on")

    def json(self, name: str) -> Any:
        value = self.values.get(name)
        if value is None or value == "":
            return None
        if isinstance(value, str):
            try:
                # A field the service's body check did not see (multipart, query string).
                check_json_text(value, self.max_depth, f"argument {name!r}")
            except BodyTooDeep as exc:
                raise SlackError("invalid_arguments", str(exc)) from None
            try:
                return json.loads(value)
            except ValueError:
                raise SlackError("invalid_arguments", f"{name} must be JSON") from None
        return value

    def blocks(self) -> list[Any] | None:
        value = self.json("blocks")
        if value is not None and not isinstance(value, list):
            raise SlackError("invalid_blocks", "blocks must be an array")
        return value


async def slack_params(request: Request) -> Params:
    values: dict[str, Any] = dict(request.query_params)
    files: dict[str, bytes] = {}
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST":
        if ctype == "application/json":
            try:
                body = json.loads(await request.body() or b"{}")
            except ValueError:
                raise SlackError("invalid_json") from None
            if not isinstance(body, dict):
                raise SlackError("invalid_json", "the body must be a JSON object")
            values.update(body)
        elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.form()
            for key, value in form.multi_items():
                if isinstance(value, UploadFile):
                    files[key] = await value.read()
                    values.setdefault("filename", value.filename or "")
                else:
                    values[key] = value
    return Params(values, files, json_depth_limit(request))


Handler = Callable[[WorldContext, Params, Request], dict[str, Any]]
"""A Slack method: the answer's body without ``ok``."""


@dataclass(frozen=True)
class Arg:
    """How a method reads one argument: ``kind`` is the getter (``str``, ``int``, ``bool``,
    ``need``: a string whose absence is the Slack error ``error``, ``blocks``, ``json_list``),
    ``name`` the Slack parameter when it is not the action's keyword, ``default`` the value
    when it is absent."""

    kind: str = "str"
    name: str | None = None
    default: Any = None
    error: str = "invalid_arguments"

    def of(self, name: str) -> Arg:
        """The same reading of the Slack parameter ``name``."""
        return replace(self, name=name)

    def otherwise(self, default: Any) -> Arg:
        """The same reading, ``default`` when absent."""
        return replace(self, default=default)

    def read(self, p: Params, keyword: str) -> Any:
        name = self.name or keyword
        if self.kind == "need":
            return p.need(name, self.error)
        if self.kind == "int":
            return p.int(name, self.default)
        if self.kind == "bool":
            return p.bool(name, bool(self.default))
        if self.kind == "blocks":
            return p.blocks()
        if self.kind == "json_list":
            return p.json(name) or []
        return p.str(name, self.default)


STR = Arg()
TEXT = Arg(default="")  # a string, empty when absent
INT = Arg("int")
BOOL = Arg("bool")
BLOCKS = Arg("blocks")
JSON_LIST = Arg("json_list")  # a JSON array (or its text), empty when absent


def need(error: str) -> Arg:
    """A required string; its absence answers Slack's ``error``."""
    return Arg("need", error=error)


@dataclass(frozen=True)
class Call:
    """A method that maps its arguments onto ``action``'s keywords, in order (the first
    missing required one is the error)."""

    action: Callable[..., dict[str, Any]]
    args: Mapping[str, Arg]

    def __post_init__(self) -> None:
        inspect.signature(self.action).bind_partial(None, **dict.fromkeys(self.args))

    def __call__(self, ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
        return self.action(ctx, **{key: arg.read(p, key) for key, arg in self.args.items()})


def call(action: Callable[..., dict[str, Any]], **args: Arg) -> Call:
    """The method that calls ``action(ctx, **{keyword: arg read from the call})``; raises
    ``TypeError`` at import when a keyword is not ``action``'s."""
    return Call(action, args)
