"""Verify a web-app candidate: build and serve it in a sandbox of the sandbox service, open it
through the port the service exposes for the guest, drive it with Chromium, compare it with
the reference app.

Reward (documented in docs/verifier.md): 0 on a failed build, a server that never answers, an
uncaught error in the app's own scripts during the checks, or a faked artifact (a page that
looks like the reference but has no behaviour — a static image — or whose checked output is
there before the actions that should produce it, where the reference's is not); otherwise
the weighted mean of the functional pass rate, DOM similarity, SSIM and (when a judge is asked
for and answers usably) the model-judge score, with the task's weights.

The app runs in a microVM of the sandbox service (the Debian image: python3, nodejs, npm) when
the service has the microvm runtime, else on its ``process`` runtime, named as a fallback in
the result's ``runtime``.
"""

from __future__ import annotations

import functools
import http.server
import json
import secrets
import shlex
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
from pydantic import BaseModel, Field

from services.verifier.web.browser import BrowserReport, run_checks
from services.verifier.web.judge import JudgeTerm, WebJudge, judge_app
from services.verifier.web.similarity import dom_similarity, ssim
from services.verifier.web.spec import MAX_APP_BYTES, WebTask, load_web_task
from services.verifier.web.start import TAG_KEY, create_sandbox, kill_tagged
from shared.clients import SandboxClient
from shared.until import until

APP_DIR = "/home/user/app"
MEMORY_MB = 512
"""Guest memory of the sandbox an app is built and served in (npm needs a few hundred MB)."""
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
    runtime: str = Field("", description="Where the app ran: microvm, or process (and why).")
    sandbox_s: float | None = Field(
        None, description="Seconds from sandbox create to its kill (build, serve, checks)."
    )
    judge: JudgeTerm | None = Field(None, description="The model-judge term, when asked for.")
    formula: str = (
        "0 if build_failed|no_server|runtime_error|faked_artifact else "
        "(w_f*pass_rate + w_dom*dom + w_px*ssim [+ w_j*judge]) / (w_f + w_dom + w_px [+ w_j]); "
        "the judge term only when asked for and its score is usable"
    )
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
    server = _QuietServer(("127.0.0.1", 0), handler)
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


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """The browser closing a connection mid-answer is no error of the reference's."""


def _wait_http(url: str, timeout_s: float) -> bool:
    """Whether the app's server answered (below 500) within ``timeout_s``, asked every 250 ms."""
    return until(lambda: httpx.get(url + "/", timeout=2.0).status_code < 500, timeout_s, 0.25,
                 errors=(httpx.HTTPError,))  # fmt: skip


def choose_runtime(sandbox: SandboxClient, requested: str = "auto") -> tuple[str, str]:
    """(runtime, note). ``auto``: the sandbox service's microvm runtime when it is available
    there, else the ``process`` runtime as a named fallback (bubblewrap on the service host)."""
    return runtime_plan(sandbox, requested)[0][:2]


def runtime_plan(sandbox: SandboxClient, requested: str = "auto") -> list[tuple[str, str, dict]]:
    """The runtimes to try in turn, ``(runtime, note, network)``: the requested one alone; for
    ``auto``, the microvm runtime and then, when the service has it, the process runtime (for a
    guest that does not boot under load), else the process runtime alone."""
    if requested != "auto":
        return [(requested, f"{requested} runtime (requested)", _network(requested))]
    infos = {r.name: r for r in sandbox.runtimes()}
    mv, proc = infos.get("microvm"), infos.get("process")
    if mv is not None and mv.available:
        plan = [("microvm", "microvm runtime", _network("microvm"))]
        if proc is not None and proc.available:
            note = "process runtime (fallback: the microvm did not start)"
            plan.append(("process", note, _network("process")))
        return plan
    why = mv.reason if mv is not None else "not installed on the sandbox service"
    return [("process", f"process runtime (fallback: microvm unavailable: {why})",
             _network("process"))]  # fmt: skip


def _network(runtime: str) -> dict[str, Any]:
    """No egress. A microVM still needs its network device for the guest-port route, so it
    gets an empty allowlist; the process runtime's route needs none."""
    if runtime == "microvm":
        return {"mode": "allowlist", "allow": []}
    return {"mode": "none"}


def _run(sandbox: SandboxClient, sid: str, cmd: str, timeout: float) -> tuple[int, str]:
    out = sandbox.exec(sid, cmd, cwd=APP_DIR, timeout=timeout)
    return out.exit_code, (out.stdout + out.stderr)[-4000:]


def _package_steps(files: dict[str, bytes]) -> tuple[list[tuple[str, str]], str | None]:
    """Build steps and start command of a ``package.json`` app.

    Scripts run the way ``npm run`` runs them (``sh -c`` in the app, ``node_modules/.bin`` first
    on PATH, pre/post hooks) but without the npm CLI itself, whose own start-up takes most of
    a minute in a TCG microVM; npm runs only for ``npm install --offline``, when the app
    declares dependencies and ships no ``node_modules/`` (the sandbox has no registry, so
    dependencies must be vendored: without them the install fails the build).

    Raises:
        ValueError: package.json is not an object with string scripts.
    """
    pkg = json.loads(files["package.json"])
    if not isinstance(pkg, dict):
        raise ValueError("package.json is not a JSON object")
    scripts = pkg.get("scripts") or {}
    if not isinstance(scripts, dict) or not all(isinstance(v, str) for v in scripts.values()):
        raise ValueError("package.json's scripts must map names to command strings")
    deps = [pkg.get(k) or {} for k in ("dependencies", "devDependencies")]
    if not all(isinstance(d, dict) for d in deps):
        raise ValueError("package.json's dependencies must be objects")
    steps = []
    if any(deps) and not any(n.startswith("node_modules/") for n in files):
        steps.append(("npm install", "npm install --offline --no-audit --no-fund"))

    def script(name: str) -> str:
        cmd = shlex.quote(scripts[name])
        return f'echo "> {name}: "{cmd}; PATH="$PWD/node_modules/.bin:$PATH" sh -c {cmd}'

    for name in ("prebuild", "build", "postbuild"):
        if name in scripts:
            steps.append((f"script {name!r}", script(name)))
    start = script("start") if "start" in scripts else None
    return steps, start


def _start_app(
    sandbox: SandboxClient, sid: str, task: WebTask, files: dict[str, bytes]
) -> tuple[bool, str]:
    """Upload, build, serve. (built, log).

    ``build.sh`` runs with ``sh``; else a ``package.json`` app is built by its scripts and
    served by its ``start`` script (``PORT`` and ``HOST`` set) when it has one
    (:func:`_package_steps`). Anything else is served as static files by ``python3 -m
    http.server`` (from ``dist/`` when the build made one)."""
    for name, data in files.items():
        sandbox.write_file(sid, f"{APP_DIR}/{name}", data)
    log, start = "", None
    steps: list[tuple[str, str]] = []
    if "build.sh" in files:
        steps.append(("build.sh", "sh build.sh"))
    elif "package.json" in files:
        try:
            steps, start = _package_steps(files)
        except ValueError as exc:
            return False, f"bad package.json: {exc}"
    for what, cmd in steps:
        code, out = _run(sandbox, sid, cmd, task.build_timeout_s)
        log += out
        if code != 0:
            return False, log + f"\n{what} exited {code}"
    if start is None:
        code, _ = _run(sandbox, sid, "test -d dist", 30)
        root = f"{APP_DIR}/dist" if code == 0 else APP_DIR
        start = f"exec python3 -m http.server {task.port} --bind 0.0.0.0 --directory {root}"
    sandbox.exec(
        sid,
        f"{start} > /tmp/k3s-server.log 2>&1",
        cwd=APP_DIR,
        env={"PORT": str(task.port), "HOST": "0.0.0.0"},
        background=True,
        timeout=0,
    )
    return True, log


def _server_log(sandbox: SandboxClient, sid: str) -> str:
    try:
        return sandbox.read_file(sid, "/tmp/k3s-server.log").decode(errors="replace")[-2000:]
    except Exception:  # noqa: BLE001 - only a diagnostic
        return ""


def verify_web(
    task_name: str,
    candidate: Path,
    sandbox: SandboxClient,
    *,
    template: str = "debian",
    runtime: str = "auto",
    server_timeout_s: float = 90.0,
    judge: WebJudge | None = None,
    create_timeout_s: float = 300.0,
    ttl_s: int = 900,
    orphan_grace_s: float = 60.0,
    tag: str | None = None,
    create_retries: int = 1,
) -> WebResult:
    """Verify one candidate directory. ``runtime``: ``auto`` (microvm when the sandbox service
    has it, else ``process``, named as a fallback in the result), ``microvm`` or ``process``.
    ``judge``: ask a judge model for the optional model-judge term.

    The sandbox is created with its own bound (``create_timeout_s``), a lifetime (``ttl_s``, the
    backstop) and a metadata tag; whatever happens after — a failed or timed-out create, a build
    that raises, a cancelled job — it is killed by id, and when the create failed, whatever
    sandbox carries the tag is looked for during ``orphan_grace_s`` and killed. A create that
    fails for the infrastructure's sake is tried again (``create_retries``), then on the next
    runtime of the plan; after that the job ends ``sandbox_unavailable``
    (:class:`~services.verifier.web.start.SandboxUnavailable`), never with a verdict."""
    task = load_web_task(task_name)
    files = app_files(candidate)
    plan = runtime_plan(sandbox, runtime)
    word = secrets.choice(WORDS) + str(secrets.randbelow(10_000))
    with _serve_reference(task.reference_dir) as ref_url:
        ref = run_checks(ref_url, task.checks, word, task.viewport)
    t0 = time.monotonic()
    tag = tag or secrets.token_hex(8)
    body = {"templateID": template, "timeout": ttl_s, "memoryMB": MEMORY_MB,
            "metadata": {TAG_KEY: tag}}  # fmt: skip
    sb, note = create_sandbox(sandbox, body, plan, create_timeout_s=create_timeout_s,
                              orphan_grace_s=orphan_grace_s, tag=tag, retries=create_retries)  # fmt: skip
    head = dict(task=task.name, runtime=note, reward=0.0)
    got: BrowserReport | None = None
    try:
        built, log = _start_app(sandbox, sb.sandboxID, task, files)
        if not built:
            result = WebResult(
                **head, zero_rule="build_failed", reason="build failed", build_log=log
            )
        else:
            host = sandbox.get_json(f"/sandboxes/{sb.sandboxID}/ports/{task.port}")["host"]
            url = f"http://{host}"
            if _wait_http(url, server_timeout_s):
                got = run_checks(url, task.checks, word, task.viewport)
            else:
                result = WebResult(
                    **head,
                    zero_rule="no_server",
                    reason=f"no HTTP answer on port {task.port} within {server_timeout_s:.0f} s",
                    build_log=(log + "\n" + _server_log(sandbox, sb.sandboxID)).strip(),
                )
    finally:
        try:
            sandbox.kill(sb.sandboxID)
        except Exception:  # noqa: BLE001 - the result matters more than the cleanup
            kill_tagged(sandbox, tag, 0)
    sandbox_s = round(time.monotonic() - t0, 2)
    if got is not None:  # scored (and judged) after the sandbox is gone
        result = _score(task, ref, got, log, judge=judge, source=_index_source(files))
        result.runtime = note
    result.sandbox_s = sandbox_s
    return result


def _index_source(files: dict[str, bytes]) -> str:
    for name in ("dist/index.html", "index.html", "public/index.html", "src/index.html"):
        if name in files:
            return files[name].decode(errors="replace")
    return ""


def _score(
    task: WebTask,
    ref: BrowserReport,
    got: BrowserReport,
    log: str,
    *,
    judge: WebJudge | None = None,
    source: str = "",
) -> WebResult:
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
    zero = _zero_rule(got, ref, initial_ssim)
    if zero is not None:
        return WebResult(**base, reward=0.0, zero_rule=zero[0], reason=zero[1])
    w = task.weights
    terms = [(w.functional, pass_rate), (w.dom, dom), (w.pixel, pixel)]
    term = judge_app(judge, task, got, source) if judge is not None else None
    if term is not None and term.score is not None:
        terms.append((w.judge, term.score))
    total = sum(weight for weight, _ in terms)
    reward = sum(weight * value for weight, value in terms) / total if total > 0 else 0.0
    judged = (
        ""
        if term is None
        else f"; judge {term.score:.2f}"
        if term.score is not None
        else "; judge dropped"
    )
    return WebResult(
        **base,
        reward=reward,
        judge=term,
        reason=f"{sum(c.passed for c in checks)}/{len(checks)} checks; DOM {dom:.2f}; SSIM {pixel:.2f}{judged}",
    )


def _zero_rule(
    got: BrowserReport, ref: BrowserReport, initial_ssim: float
) -> tuple[str, str] | None:
    """The zero rule the candidate's run breaks, with the reason, or None."""
    if got.page_errors:
        return "runtime_error", f"uncaught error in the app: {got.page_errors[0][:200]}"
    facts = got.facts or {}
    static_image = facts.get("controls", 0) == 0 and facts.get("largest_media", 0) >= 0.5 * max(
        facts.get("viewport", 1), 1
    )
    if static_image and initial_ssim > 0.8:
        return (
            "faked_artifact",
            f"a static image of the reference (SSIM {initial_ssim:.2f}, no controls)",
        )
    hardcoded = [
        c.name
        for c, r in zip(got.checks, ref.checks, strict=True)
        if c.passed and c.holds_without_actions and not r.holds_without_actions
    ]
    if hardcoded:
        return (
            "faked_artifact",
            f"checked output present before the actions that should produce it: {', '.join(hardcoded)}",
        )
    return None
