"""The report of a real episode (the runner, the oracle policy, a scenario of the real tools
service) whose first worker dies mid-run: the killed attempt and its retry both appear, marked,
and each check's verdict sits on the world call that decided it, after the line where its event
arrived, never on that arrival line."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from services.orchestrator.episode.export import trajectory
from services.orchestrator.episode.models import EpisodeRow
from services.orchestrator.episode.runner import EpisodeRunner, now_utc
from services.orchestrator.episode.schema import EpisodeCreate
from services.orchestrator.episode.service import create_episode, reap
from services.orchestrator.report import render_report
from services.orchestrator.report_view import ON_CALL, build

pytestmark = pytest.mark.timeout(900)
BODY = {"task": {"scenario": "finance_expenses", "seed": 0}, "harness": "claude-code",
        "policy": {"kind": "oracle"}}  # fmt: skip


class Killed(BaseException):
    """The worker dying right after the tools service moved the clock (not an Exception: the
    runner does not catch it, as it could not catch a SIGKILL)."""


def _row(db: Any, episode_id: str) -> EpisodeRow:
    with db.session() as s:
        row = s.get(EpisodeRow, episode_id)
        s.expunge(row)
        return row


def _killed_then_retried(db: Any, services: Any) -> str:
    episode_id = create_episode(db, EpisodeCreate.model_validate(BODY), lambda _id: None)
    tools, real = services.tools, services.tools.advance
    moves: list[str] = []

    def advance_then_die(world_id: str, **kw: Any) -> Any:
        out = real(world_id, **kw)
        moves.append(kw["to"])
        if len(moves) == 2:
            raise Killed
        return out

    tools.advance = advance_then_die  # type: ignore[method-assign]
    try:
        with pytest.raises(Killed):
            EpisodeRunner(db, services, episode_id).run()
    finally:
        tools.advance = real  # type: ignore[method-assign]
    assert _row(db, episode_id).status == "running"  # as a dead worker leaves it
    with db.session() as s:  # its lease lapses; the reaper puts it back on the queue
        lease = services.settings.orchestrator.lease_s
        s.get(EpisodeRow, episode_id).heartbeat_at = now_utc() - timedelta(seconds=lease + 1)
    queued: list[str] = []
    assert reap(db, services, queued.append)["requeued"] == [episode_id]
    EpisodeRunner(db, services, episode_id).run()  # the re-queued delivery
    return episode_id


def test_a_killed_attempt_its_retry_and_verdicts_on_the_deciding_calls(orch_db, services) -> None:
    episode_id = _killed_then_retried(orch_db, services)
    row = _row(orch_db, episode_id)
    assert row.status == "succeeded" and row.attempts == 2, row.error_message
    doc = trajectory(orch_db, episode_id)
    html = render_report(doc)

    # both attempts, marked, the retry after the killed attempt's work
    assert '<span id="attempts">attempts 2</span>' in html
    first, retry = html.index('data-attempt="1"'), html.index('data-attempt="2"')
    assert first < html.index('class="item tool-call') < retry
    assert "retry: the attempt before stopped without finishing" in html[retry:]

    # every check's verdict is in the table, and the oracle passes them all
    checks = sum(len(e["checks"]) for e in row.result["events"])
    assert html.count('<tr class="check pass">') == checks > 0

    lines = html.splitlines()
    arrived: dict[str, int] = {}  # event -> the line where it arrived
    on_calls = 0
    for n, line in enumerate(lines):
        if 'class="item clock"' in line:
            assert "verdict" not in line or "decided when the clock moved" in line
            for event in re.findall(r'<span class="event">([^<]+)</span>', line):
                arrived.setdefault(event, n)
        if 'class="item tool-call' in line and "decided by this call" in line:
            assert re.search(r"<b>mcp__\w+__[\w-]+</b>", line)  # a world call, not a local tool
            for event in re.findall(r'data-check="([^/"]+)/', line):
                on_calls += 1
                assert arrived.get(event, -1) < n, f"{event} credited before it arrived"
    # the record names the deciding call for most checks (each oracle step answers one event);
    # the rest are labelled where they went, none on an arrival line
    view = build(doc)
    assert on_calls == sum(v.how == ON_CALL for v in view["checks"])
    assert on_calls >= checks // 2, [(v.key, v.how) for v in view["checks"]]
    for v in view["checks"]:
        assert f'data-check="{v.key}"' in html
