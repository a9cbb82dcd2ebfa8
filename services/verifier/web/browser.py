"""Drives an app with Playwright and Debian's Chromium: the task's checks, screenshots, the DOM
signature, and the page's own errors. The browser may reach the app's origin and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

from services.verifier.web.spec import Step, WebCheck
from shared.settings import get_settings

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
STEP_TIMEOUT_MS = 5000
DOM_SIGNATURE = """() => { const out = []; const walk = (el, d) => { out.push(d + ':' + el.tagName.toLowerCase()
  + (el.id ? '#' + el.id : '')); for (const c of el.children) walk(c, d + 1); }; walk(document.body, 0); return out; }"""
PAGE_FACTS = """() => { const text = document.body.innerText.trim(); let img = 0;
  for (const el of document.querySelectorAll('img,canvas,svg,picture,video')) { const r = el.getBoundingClientRect();
  img = Math.max(img, r.width * r.height); } return {text_chars: text.length, largest_media: img,
  viewport: window.innerWidth * window.innerHeight, controls: document.querySelectorAll('button,input,select,textarea,a[href]').length}; }"""


@dataclass
class CheckRun:
    name: str
    passed: bool
    detail: str = ""
    holds_without_actions: bool = False


@dataclass
class BrowserReport:
    checks: list[CheckRun] = field(default_factory=list)
    screenshots: dict[str, bytes] = field(default_factory=dict)
    dom: list[str] = field(default_factory=list)
    text: str = ""
    facts: dict = field(default_factory=dict)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    blocked_requests: list[str] = field(default_factory=list)


def _fill(text: str | None, word: str) -> str:
    return (text or "").replace("{word}", word)


def _expect(page: Page, step: Step, word: str) -> tuple[bool, str]:
    loc = page.locator(step.selector or "body")
    if step.action == "expect_count":
        n = loc.count()
        return n == step.count, f"{step.selector}: {n} elements, expected {step.count}"
    if step.action == "expect_visible":
        ok = loc.count() > 0 and loc.first.is_visible()
        return ok, f"{step.selector} visible: {ok}"
    if loc.count() == 0:
        return False, f"{step.selector}: no such element"
    got = (loc.first.text_content(timeout=STEP_TIMEOUT_MS) or "").strip()
    if step.equals is not None:
        want = _fill(step.equals, word)
        return got == want, f"{step.selector}: {got[:80]!r}, expected {want[:80]!r}"
    want = _fill(step.contains, word)
    return want in got, f"{step.selector}: {got[:80]!r} lacks {want[:80]!r}"


def _act(page: Page, base: str, step: Step, word: str, shots: dict[str, bytes]) -> None:
    if step.action == "goto":
        page.goto(base + step.path, wait_until="load", timeout=15000)
    elif step.action == "click":
        page.click(step.selector or "body", timeout=STEP_TIMEOUT_MS)
    elif step.action == "type":
        page.fill(step.selector or "body", _fill(step.text, word), timeout=STEP_TIMEOUT_MS)
    elif step.action == "press":
        page.press(step.selector or "body", step.key or "Enter", timeout=STEP_TIMEOUT_MS)
    elif step.action == "screenshot":
        shots[step.name or f"shot{len(shots)}"] = page.screenshot()


def run_checks(
    base: str,
    checks: list[WebCheck],
    word: str,
    viewport: tuple[int, int],
    chromium: str | None = None,
) -> BrowserReport:
    """Every check on a fresh page; for each, also whether its expectations already hold on a
    fresh load with none of its actions done (what hard-coded output looks like)."""
    report = BrowserReport()
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
    with sync_playwright() as p:
        path = chromium or str(get_settings().verifier.chromium_path)
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        try:
            ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})

            def guard(route) -> None:  # noqa: ANN001
                url = route.request.url
                if url.startswith(origin + "/") or url == origin or url.startswith("data:"):
                    route.continue_()
                else:
                    report.blocked_requests.append(url[:200])
                    route.abort()

            ctx.route("**/*", guard)

            def page() -> Page:
                pg = ctx.new_page()
                pg.on("pageerror", lambda e: report.page_errors.append(str(e)[:500]))
                pg.on(
                    "console",
                    lambda m: (
                        report.console_errors.append(m.text[:500]) if m.type == "error" else None
                    ),
                )
                return pg

            first = page()
            first.goto(base + "/", wait_until="load", timeout=15000)
            report.dom = first.evaluate(DOM_SIGNATURE)
            report.facts = first.evaluate(PAGE_FACTS)
            report.text = first.evaluate("() => document.body.innerText")[:20000]
            report.screenshots["initial"] = first.screenshot()
            first.close()
            for check in checks:
                pg = page()
                ok, detail = True, ""
                try:
                    for step in check.steps:
                        if step.is_expectation:
                            passed, why = _expect(pg, step, word)
                            if not passed:
                                ok, detail = False, why
                                break
                        else:
                            _act(pg, base, step, word, report.screenshots)
                except PlaywrightError as exc:
                    ok, detail = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                pg.close()
                report.checks.append(
                    CheckRun(check.name, ok, detail, _holds_untouched(page, base, check, word))
                )
        finally:
            browser.close()
    return report


def _holds_untouched(page, base: str, check: WebCheck, word: str) -> bool:  # noqa: ANN001
    expectations = [s for s in check.steps if s.is_expectation]
    if not expectations:
        return False
    pg = page()
    try:
        pg.goto(base + "/", wait_until="load", timeout=15000)
        return all(_expect(pg, s, word)[0] for s in expectations)
    except PlaywrightError:
        return False
    finally:
        pg.close()
