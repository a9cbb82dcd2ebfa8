"""Slack's methods are one declarative table: an entry that only passes its arguments on is a
``call`` of the action with a typed reading per keyword, checked against the action at import."""

from __future__ import annotations

from typing import Any

import pytest

from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.params import BOOL, INT, STR, TEXT, Call, Params, call, need
from services.tools.apps.slack.routes import METHODS


def act(ctx: Any, *, channel: str, ts: str, limit: int | None = None, flag: bool = False) -> dict:
    return {"channel": channel, "ts": ts, "limit": limit, "flag": flag}


def test_a_call_reads_each_argument_as_declared() -> None:
    method = call(
        act, channel=need("channel_not_found"), ts=TEXT.of("thread"), limit=INT, flag=BOOL
    )
    p = Params({"channel": "C1", "thread": "1.2", "limit": "5", "flag": "true"}, {})
    assert method(None, p, None) == {"channel": "C1", "ts": "1.2", "limit": 5, "flag": True}  # type: ignore[arg-type]
    assert method(None, Params({"channel": "C1"}, {}), None)["ts"] == ""  # type: ignore[arg-type]


def test_the_first_missing_required_argument_is_the_error() -> None:
    method = call(act, channel=need("channel_not_found"), ts=need("thread_not_found"))
    with pytest.raises(SlackError) as exc:
        method(None, Params({"ts": "1"}, {}), None)  # type: ignore[arg-type]
    assert exc.value.error == "channel_not_found"
    with pytest.raises(SlackError) as exc:
        call(act, channel=STR, limit=INT, ts=STR)(None, Params({"limit": "x"}, {}), None)  # type: ignore[arg-type]
    assert exc.value.error == "invalid_arguments"


def test_a_keyword_the_action_does_not_take_fails_at_import() -> None:
    with pytest.raises(TypeError):
        call(act, chanel=STR)


def test_most_methods_are_declared_calls() -> None:
    calls = [name for name, handler in METHODS.items() if isinstance(handler, Call)]
    own = sorted(set(METHODS) - set(calls))
    assert own == [
        "files.getUploadURLExternal",
        "files.info",
        "files.upload",
        "users.profile.get",
    ]
    assert len(calls) == len(METHODS) - 4
