"""The HTML report, written beside the trajectory, renders in headless Chromium (Debian's,
through Playwright): a screenshot is taken and the key elements are there."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.trajectory import Trajectory
from tests.orchestrator.test_oracle_episode import run_oracle_episode

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.mark.browser
def test_report_renders_in_chromium(orch_db, services, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    row, _ = run_oracle_episode(orch_db, services, "finance_expenses", "claude-code")
    assert row.status == "succeeded" and row.result_location
    html = services.objects.get(f"{row.result_location}/report.html")
    traj = Trajectory.from_json(services.objects.get(f"{row.result_location}/trajectory.json"))
    assert traj.metadata.reward == row.reward
    page_file = tmp_path / "report.html"
    page_file.write_bytes(html)
    shot = tmp_path / "report.png"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(page_file.as_uri())
            page.screenshot(path=str(shot), full_page=True)
            score = page.locator("#score").inner_text()
            days = page.locator("section.day").count()
            day_titles = page.locator("section.day h2").all_inner_texts()
            calls = page.locator(".tool-call").count()
            checks = page.locator("tr.check").count()
            passed = page.locator("tr.check.pass").count()
            harness = page.locator("#harness").inner_text()
            height = page.evaluate("document.body.scrollHeight")
        finally:
            browser.close()

    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert f"events passed {row.result['events_passed']}/{row.result['events_total']}" in score
    assert days >= 3 and day_titles[0].startswith("Simulated day 1")  # "· turn 1 of 2" when several
    assert calls == sum(len(s.observations) for s in traj.steps if s.kind == "model")
    assert checks == sum(len(e["checks"]) for e in row.result["events"])
    assert passed == checks  # the oracle passes every check
    assert harness == "claude-code"
    assert height > 900
