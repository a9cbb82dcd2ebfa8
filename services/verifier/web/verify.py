"""Verify a web-app candidate: build and serve it in a sandbox of the sandbox service, open it
through the port the service exposes for the guest, drive it with Chromium, compare it with
the reference app.

Reward (documented in docs/verifier.md): 0 on a failed build, a server that never answers, an
uncaught error in the app's own scripts during the checks, or a faked artifact (a page that
looks like the reference but has no behaviour — a static image — or whose checked output is
there before the actions that should produce it, where the reference's is not); otherwise
``functional·pass_rate + dom·dom_similarity + pixel·ssim`` with the task's weights.
"""

from __future__ import annotations

import functools
import http.server
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
from pydantic import BaseModel, Field

from services.verifier.web.browser import BrowserReport, run_checks
from services.verifier.web.similarity import dom_similarity, ssim
from services.verifier.web.spec import WebTask, load_web_task
from shared.clients import SandboxClient

APP_DIR = "/home/user/app"
MAX_APP_BYTES = 20 << 20
WORDS = (
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
)


class BadWebCandidate(ValueError):
    pass


class WebCheckResult(BaseModel):
    name: str
    passed: bool
    detail: str = ""


class WebResult(BaseModel):
    task: str
    reward: float
    reason: str
    zero_rule: str | None = Field(
        None, description="build_failed, no_server, runtime_error, faked_artifact, or null."
    )
    checks: list[WebCheckResult] = Field(default_factory=list)
    pass_rate: float = 0.0
    dom_similarity: float = 0.0
    pixel_similarity: float = 0.0
    page_errors: list[str] = Field(default_factory=list)
    console_errors: list[str] = Field(default_factory=list)
    blocked_requests: list[str] = Field(default_factory=list)
    build_log: str = ""
    formula: str = "0 if build_failed|no_server|runtime_error|faked_artifact else w_f*pass_rate + w_dom*dom + w_px*ssim"
    screenshots: dict[str, bytes] = Field(default_factory=dict, exclude=True)


def app_files(path: Path) -> dict[str, bytes]:
    path = Path(path)
    if not path.is_dir():
        raise BadWebCandidate(f"candidate {path} is not a directory")
    files = {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }
    if not files:
        raise BadWebCandidate(f"candidate {path} is empty")
    if sum(len(v) for v in files.values()) > MAX_APP_BYTES:
        raise BadWebCandidate(f"candidate {path} is larger than {MAX_APP_BYTES} bytes")
    for name in files:
        if ".." in PurePosixPath(name).parts:
            raise BadWebCandidate(f"file {name!r} escapes the app directory")
    return files


@contextmanager
def _serve_reference(directory: Path) -> Iterator[str]:
    """The trusted reference, served from the verifier on loopback."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def _wait_http(url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=2.0).status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    return False


def _start_app(
    sandbox: SandboxClient, sid: str, task: WebTask, files: dict[str, bytes]
) -> tuple[bool, str, str]:
    """Upload, build, serve. (built, log, directory served)."""
    for name, data in files.items():
        sandbox.write_file(sid, f"{APP_DIR}/{name}", data)
    log = ""
    if "build.sh" in files:
        out = sandbox.exec(sid, "sh build.sh", cwd=APP_DIR, timeout=task.build_timeout_s)
        log = (out.stdout + out.stderr)[-4000:]
        if out.exit_code != 0:
            return False, log + f"\nbuild.sh exited {out.exit_code}", ""
    elif "package.json" in files:
        out = sandbox.exec(
            sid, "npm run build --if-present", cwd=APP_DIR, timeout=task.build_timeout_s
        )
        log = (out.stdout + out.stderr)[-4000:]
        if out.exit_code != 0:
            return False, log + f"\nnpm run build exited {out.exit_code}", ""
    listing = sandbox.exec(sid, f"test -d {APP_DIR}/dist && echo dist || echo root", timeout=30)
    root = f"{APP_DIR}/dist" if "dist" in listing.stdout else APP_DIR
    sandbox.exec(
        sid,
        ["python3", "-m", "http.server", str(task.port), "--bind", "0.0.0.0", "--directory", root],
        background=True,
        timeout=0,
    )
    return True, log, root


def verify_web(
    task_name: str,
    candidate: Path,
    sandbox: SandboxClient,
    *,
    template: str = "debian",
    runtime: str | None = None,
    server_timeout_s: float = 60.0,
) -> WebResult:
    task = load_web_task(task_name)
    files = app_files(candidate)
    word = secrets.choice(WORDS) + str(secrets.randbelow(10_000))
    with _serve_reference(task.reference_dir) as ref_url:
        ref = run_checks(ref_url, task.checks, word, task.viewport)
    fields: dict[str, Any] = {"timeout": 600, "network": {"mode": "none"}}
    if runtime:
        fields["runtime"] = runtime
    sb = sandbox.create(template, **fields)
    try:
        built, log, _ = _start_app(sandbox, sb.sandboxID, task, files)
        if not built:
            return WebResult(
                task=task.name,
                reward=0.0,
                zero_rule="build_failed",
                reason="build failed",
                build_log=log,
            )
        host = sandbox.get_json(f"/sandboxes/{sb.sandboxID}/ports/{task.port}")["host"]
        url = f"http://{host}"
        if not _wait_http(url, server_timeout_s):
            return WebResult(
                task=task.name,
                reward=0.0,
                zero_rule="no_server",
                reason=f"no HTTP answer on port {task.port} within {server_timeout_s:.0f} s",
                build_log=log,
            )
        got = run_checks(url, task.checks, word, task.viewport)
    finally:
        try:
            sandbox.kill(sb.sandboxID)
        except Exception:  # noqa: BLE001 - the result matters more than the cleanup
            pass
    return _score(task, ref, got, log)


def _score(task: WebTask, ref: BrowserReport, got: BrowserReport, log: str) -> WebResult:
    checks = [WebCheckResult(name=c.name, passed=c.passed, detail=c.detail) for c in got.checks]
    pass_rate = sum(c.passed for c in got.checks) / len(got.checks)
    dom = dom_similarity(ref.dom, got.dom)
    shots = [k for k in ref.screenshots if k in got.screenshots]
    pixel = (
        sum(ssim(ref.screenshots[k], got.screenshots[k], task.viewport) for k in shots) / len(shots)
        if shots
        else 0.0
    )
    initial_ssim = ssim(ref.screenshots["initial"], got.screenshots["initial"], task.viewport)
    base = dict(
        task=task.name, checks=checks, pass_rate=pass_rate, dom_similarity=dom, pixel_similarity=pixel,
        page_errors=got.page_errors, console_errors=got.console_errors, blocked_requests=got.blocked_requests,
        build_log=log, screenshots=got.screenshots,
    )  # fmt: skip
    if got.page_errors:
        return WebResult(
            **base,
            reward=0.0,
            zero_rule="runtime_error",
            reason=f"uncaught error in the app: {got.page_errors[0][:200]}",
        )
    facts = got.facts or {}
    static_image = facts.get("controls", 0) == 0 and facts.get("largest_media", 0) >= 0.5 * max(
        facts.get("viewport", 1), 1
    )
    if static_image and initial_ssim > 0.8:
        return WebResult(
            **base,
            reward=0.0,
            zero_rule="faked_artifact",
            reason=f"a static image of the reference (SSIM {initial_ssim:.2f}, no controls)",
        )
    hardcoded = [
        c.name
        for c, r in zip(got.checks, ref.checks, strict=True)
        if c.passed and c.holds_without_actions and not r.holds_without_actions
    ]
    if hardcoded:
        return WebResult(
            **base,
            reward=0.0,
            zero_rule="faked_artifact",
            reason=f"checked output present before the actions that should produce it: {', '.join(hardcoded)}",
        )
    w = task.weights
    reward = w.functional * pass_rate + w.dom * dom + w.pixel * pixel
    return WebResult(
        **base,
        reward=reward,
        reason=f"{sum(c.passed for c in checks)}/{len(checks)} checks; DOM {dom:.2f}; SSIM {pixel:.2f}",
    )
