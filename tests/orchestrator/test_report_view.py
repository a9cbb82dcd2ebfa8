"""The report read from recorded trajectories, without running an episode: where each check's
verdict goes (the call that flipped it last, the clock, held from the start, or the end of a
day, labelled), an installed agent's model calls with their tool calls' arguments and results
(long ones behind a <details>), its invocations numbered within a day, the token totals from
the recorded usage, the style sheet inlined from its static file, and a 404 for an unknown
episode's report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.orchestrator.report import css, render_report
from services.orchestrator.report_view import AT_END, HELD, ON_CALL, ON_CLOCK, Verdict, attribute
from tests.orchestrator.conftest import REPO


def _tool(flipped: dict[str, bool], before: dict[str, bool] | None = None) -> dict:
    checks = {"flipped": flipped, **({"before": before} if before is not None else {})}
    return {"kind": "tool", "name": "mcp__gmail__send_email", "arguments": "{}",
            "observation": "ok", "checks": checks}  # fmt: skip


def _verdict(key: str, passed: bool = True) -> Verdict:
    event, check = key.split("/")
    return Verdict(event, check, passed, "", AT_END)


def test_a_verdict_goes_to_the_last_flip_that_still_stands() -> None:
    keys = ["e/by_call", "e/held", "e/by_clock", "e/gap", "e/back_and_forth", "e/failed"]
    start = {"e/by_call": False, "e/held": True, "e/by_clock": False, "e/gap": False,
             "e/back_and_forth": False, "e/failed": False}  # fmt: skip
    items = [
        {"kind": "user", "message": {"content": "go"}},
        _tool({"e/by_call": True, "e/back_and_forth": True}, before=start),  # 1
        _tool({"e/back_and_forth": False, "e/gap": True}),  # 2
        {"kind": "clock", "day": 2, "fired": [], "checks": {"flipped": {"e/by_clock": True}}},
        _tool({"e/back_and_forth": True}),  # 4
        # a restarted loop reads the verdicts anew: e/gap went back where nothing recorded it
        _tool(
            {},
            before={
                **start,
                "e/by_call": True,
                "e/by_clock": True,
                "e/back_and_forth": True,
                "e/gap": False,
            },
        ),  # fmt: skip
    ]
    finals = [_verdict(k, k != "e/failed") for k in keys]
    finals[3].passed = True  # e/gap: passed at the end, yet no recorded flip stands behind it
    placed = attribute(items, finals)
    assert (placed["e/by_call"].how, placed["e/by_call"].at) == (ON_CALL, 1)
    assert placed["e/held"].how == HELD
    assert (placed["e/by_clock"].how, placed["e/by_clock"].at) == (ON_CLOCK, 3)
    assert placed["e/gap"].how == AT_END
    assert (placed["e/back_and_forth"].how, placed["e/back_and_forth"].at) == (ON_CALL, 4)
    assert placed["e/failed"].how == HELD  # failing from the start, and no action fixed it
    # without any record (an installed agent's calls), nothing is credited to a line
    bare = [{k: v for k, v in it.items() if k != "checks"} for it in items]
    assert {p.how for p in attribute(bare, finals).values()} == {AT_END}


LONG_RESULT = "Inbox:\n" + "\n".join(f"- message m_{i}: quarterly figures" for i in range(60))
TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "mcp__gmail__list_messages",
            "input": {"query": "from:ada@example.org", "max_results": 5}}  # fmt: skip
SEND = {"type": "tool_use", "id": "toolu_02", "name": "mcp__gmail__send_email",
        "input": {"to": "ada@example.org", "subject": "Re: figures", "body": "Approved."}}  # fmt: skip


def _exchange(at: str, messages: list, content: list, usage: dict) -> dict:
    return {
        "kind": "exchange", "at": at, "api": "messages", "status": 200, "latency_s": 0.4,
        "request": {"model": "k3", "max_tokens": 512, "messages": messages,
                    "tools": [{"name": TOOL_USE["name"]}, {"name": SEND["name"]}]},
        "response": {"id": "msg", "type": "message", "role": "assistant", "model": "k3",
                     "content": content, "stop_reason": "tool_use", "usage": usage},
    }  # fmt: skip


def installed_doc() -> dict:
    """An installed agent's trajectory as the gateway records it (Anthropic Messages): day 1
    in two invocations (the clock moved within the day), then day 2."""
    ask = [{"role": "user", "content": "You are the assistant of …"}]
    first = _exchange("2026-12-07T10:00:00+00:00", ask, [TOOL_USE],
                      {"input_tokens": 1200, "output_tokens": 40})  # fmt: skip
    answered = [*ask, {"role": "assistant", "content": [TOOL_USE, SEND]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": LONG_RESULT},
                    {"type": "tool_result", "tool_use_id": "toolu_02",
                     "content": [{"type": "text", "text": "sent: id m_99"}]}]}]  # fmt: skip
    second = _exchange("2026-12-07T10:00:05+00:00", ask, [SEND],
                       {"input_tokens": 1500, "output_tokens": 60})  # fmt: skip
    third = _exchange("2026-12-07T10:00:09+00:00", answered, [{"type": "text", "text": "Done."}],
                      {"input_tokens": 1800, "output_tokens": 5})  # fmt: skip

    def day(n: int) -> dict:
        return {"kind": "agent_day", "day": n, "outcome": "turn_ended", "returncode": 0,
                "wall_s": 3.2}  # fmt: skip

    def clock(frm: str, to: str, n: int) -> dict:
        return {"kind": "clock", "from": frm, "to": to, "day": n, "fired": ["approval-0"]}

    items = [
        {"kind": "attempt", "attempt": 1},
        {"kind": "agent", "name": "claude-code-cli", "package": "@anthropic-ai/claude-code",
         "version": "2.0.0", "runtime": "process"},
        first, second, third, day(1),
        clock("2026-03-02T09:00:00+00:00", "2026-03-02T14:00:00+00:00", 1), day(1),
        clock("2026-03-02T14:00:00+00:00", "2026-03-03T09:00:00+00:00", 2), day(2),
    ]  # fmt: skip
    events = [
        {"event_id": "approval-0", "title": "An approval", "passed": True, "checks": [
            {"id": "approval-0.c0", "passed": True, "final": True, "description": "answered",
             "evaluated_at": "2026-03-02T16:00:00+00:00"}]},
        {"event_id": "wrap-up", "title": "Wrap up", "passed": False, "checks": [
            {"id": "wrap-up.c0", "passed": False, "final": False, "description": "summary",
             "evaluated_at": "2026-03-06T18:00:00+00:00"}]},
    ]  # fmt: skip
    return {"episode_id": "ep_inst", "harness": "claude-code-cli", "policy": "openai",
            "segments": 1, "task": {"scenario": "s", "seed": 0}, "reward": 0.5,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "attempts": 1,
            "result": {"events_passed": 1, "events_total": 2, "events": events},
            "items": [{"seq": i, **it} for i, it in enumerate(items)]}  # fmt: skip


def _section(html: str, title: str) -> str:
    start = html.index(f"<h2>{title}</h2>")
    return html[start : html.index("</section>", start)]


def test_an_installed_agents_calls_show_their_arguments_and_results() -> None:
    html = render_report(installed_doc())
    day1 = _section(html, "Simulated day 1 · invocation 1 of 2")
    # the call, its arguments and the result the CLI sent back in its next request
    assert "mcp__gmail__list_messages" in day1 and "from:ada@example.org" in day1
    assert "mcp__gmail__send_email" in day1 and "Approved." in day1 and "sent: id m_99" in day1
    # a long result: its start shown, the whole of it behind a <details>
    more = day1[day1.index('<details class="more">') :]
    assert "message m_0: quarterly" in more and "message m_59: quarterly" in more
    assert "1200 + 40 tokens" in day1
    assert "→ oracle" not in html and "call(s) below" not in day1


def test_invocations_are_numbered_within_their_day_and_tokens_come_from_usage() -> None:
    html = render_report(installed_doc())
    titles = [t.split("</h2>")[0] for t in html.split('<section class="day"')[1:]]
    assert [t.split("<h2>")[1] for t in titles] == [
        "Simulated day 1 · invocation 1 of 2", "Simulated day 1 · invocation 2 of 2",
        "Simulated day 2",
    ]  # fmt: skip
    assert "agent CLI · day 1, invocation 2</b>" in html
    assert html.count("agent CLI · day 1") == 2
    prompt, completion = 1200 + 1500 + 1800, 40 + 60 + 5
    total = prompt + completion
    assert f"tokens {total} ({prompt} prompt + {completion} completion)" in html
    assert "tokens 0" not in html


def test_unattributed_verdicts_go_to_the_end_of_their_day_or_the_end_labelled() -> None:
    html = render_report(installed_doc())
    # frozen at 16:00 on day 1: decided by the end of the day's second invocation, labelled
    day1b = _section(html, "Simulated day 1 · invocation 2 of 2")
    assert (
        "decided at the end of this day" in day1b
        and 'data-check="approval-0/approval-0.c0"' in day1b
    )
    closing = _section(html, "Decided at the end")
    assert (
        'data-check="wrap-up/wrap-up.c0"' in closing
        and "decided at the end of the episode" in closing
    )
    # no verdict on the line where its event arrived
    for line in html.split("\n"):
        if 'class="item clock"' in line:
            assert "verdict" not in line


def test_the_style_sheet_is_a_static_file_inlined_in_the_single_page() -> None:
    sheet = (REPO / "services/orchestrator/report.css").read_text()
    assert css() == sheet and ".tool-call" in sheet
    html = render_report(installed_doc())
    assert f"<style>{sheet}</style>" in html and "<link" not in html and "<script" not in html
    source = (REPO / "services/orchestrator/report.py").read_text()
    assert "font:14px" not in source  # the CSS lives in the static file only
    data = (REPO / "pyproject.toml").read_text()
    assert '"*.css"' in data  # shipped in the wheel with the template


@pytest.fixture
def report_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from services.orchestrator.app import create_app
    from shared.settings import get_settings

    for name, url in (("TOOLS", "http://127.0.0.1:9"), ("MODEL", "http://127.0.0.1:9"),
                      ("SANDBOX", "http://127.0.0.1:9")):  # fmt: skip
        monkeypatch.setenv(f"K3STACK_{name}__URL", url)
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("K3STACK_DATABASE_URL", f"sqlite:///{tmp_path}/orch.db")
    monkeypatch.setenv("K3STACK_ORCHESTRATOR__REAPER_INTERVAL_S", "0")
    get_settings.cache_clear()
    with TestClient(create_app(enqueue=lambda _id: None)) as client:
        yield client
    get_settings.cache_clear()


def test_the_report_of_an_unknown_episode_is_a_404_naming_it(report_api) -> None:
    for episode_id in ("ep_missing", "not an id", "ep_" + "x" * 300):
        r = report_api.get(f"/episodes/{episode_id}/report")
        assert r.status_code == 404, r.text
        assert episode_id in json.dumps(r.json())
