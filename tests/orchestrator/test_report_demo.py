"""The report shows each tool call once (with its observation), labels no turn "(tool calls)",
shows the model's reasoning and never puts a verdict on the line where its event arrived
(without a record of what decided it, the verdict goes to the end, labelled so);
the demo names its simulated days right and its --help says what it runs."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from services.orchestrator.report import render_report
from shared.contracts.orchestrator import Episode
from tests.orchestrator.conftest import REPO

CALL = {"id": "c1", "type": "function",
        "function": {"name": "gmail__send_email", "arguments": '{"to": "ada@x.org"}'}}  # fmt: skip
DOC = {
    "episode_id": "ep_r", "harness": "claude-code", "policy": "openai", "segments": 1,
    "task": {"scenario": "s", "seed": 1}, "reward": 0.5, "usage": {},
    "result": {"events_passed": 1, "events_total": 2, "events": [
        {"event_id": "ev_ok", "title": "t", "passed": True, "checks": []},
        {"event_id": "ev_bad", "title": "u", "passed": False, "checks": []}]},
    "items": [
        {"kind": "assistant", "step": 1, "reasoning": "I should write to Ada first",
         "message": {"role": "assistant", "content": "", "tool_calls": [CALL]}},
        {"kind": "tool", "name": "gmail__send_email", "arguments": '{"to": "ada@x.org"}',
         "observation": "sent", "is_error": False},
        {"kind": "clock", "from": "a", "to": "b", "day": 2, "fired": ["ev_ok", "ev_bad"]},
    ],
}  # fmt: skip


def test_the_report_shows_each_call_once_with_reasoning_and_verdicts() -> None:
    html = render_report(DOC)
    assert html.count("gmail__send_email") == 1
    assert "(tool calls)" not in html
    assert "I should write to Ada first" in html
    arrival = next(ln for ln in html.splitlines() if 'class="item clock"' in ln)
    assert "ev_ok" in arrival and "verdict" not in arrival
    closing = html[html.index("<h2>Decided at the end</h2>") :]
    assert "decided at the end of the episode (no single deciding action recorded)" in closing
    assert '<span class="verdict pass">PASS</span> ev_ok' in closing
    assert '<span class="verdict fail">FAIL</span> ev_bad' in closing


def test_the_demo_counts_its_simulated_days_from_one() -> None:
    from shared.demo import oracle_summary

    now = datetime.now(UTC)
    ep = Episode(id="ep_d", status="succeeded", harness="claude-code", policy="oracle",
                 scenario="hr_onboarding", seed=1, created_at=now, updated_at=now, step=50,
                 tokens=0, compactions=0, simulated_day=7, world_clock=None, reward=1.0,
                 events_passed=9, events_total=9, exit_reason="scenario_end")  # fmt: skip
    assert "over 7 simulated days" in oracle_summary(ep, Path("r.html"))


def test_demo_help_says_what_it_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "shared.cli", "demo", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "smoke" not in text.lower()
    assert "episode" in text and "report" in text
