"""``k3stack demo`` / ``make demo``: start the platform, touch every service over HTTP through
the shared clients (nothing else: ``shared`` never imports ``services``), then run the main job —
a multi-day scenario end to end as an orchestrator episode (oracle policy, claude-code preset,
a microVM sandbox), its score table and HTML report, and a short episode of the same scenario
driven by a model (the tiny K3 model of the model service, whose random-weights tool calls
become error observations; or the OpenAI-compatible endpoint in ``K3STACK_DEMO_MODEL_URL``).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.clients import (
    ModelClient,
    OrchestratorClient,
    SandboxClient,
    ToolsClient,
    VerifierClient,
)
from shared.contracts.orchestrator import Episode, EpisodeCreate
from shared.jobs import JobTimeout
from shared.settings import load_settings

DEMO_SCENARIO = "hr_onboarding"

console = Console()


def _step(title: str, fn: Callable[[], str]) -> bool:
    started = time.perf_counter()
    try:
        detail = fn()
    except Exception as exc:  # noqa: BLE001 - the demo reports every failure and goes on
        console.print(f"[red]✗[/] {title}: {exc}")
        return False
    console.print(
        f"[green]✓[/] {title} [dim]({(time.perf_counter() - started) * 1000:.0f} ms)[/]"
        f"\n    {detail}"
    )
    return True


def smoke() -> bool:
    """Touch every service, then run the demo's two episodes against a running platform;
    True when every step passed."""
    settings = load_settings()
    results: list[bool] = []

    with ModelClient.from_settings(settings) as model:

        def chat() -> str:
            tools = [
                {
                    "type": "function",
                    "function": {
                        "name": "send_email",
                        "description": "Send an email.",
                        "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
                    },
                }
            ]
            reply = model.chat(
                [{"role": "user", "content": "Email Ada that the review moved to Friday."}],
                tools=tools,
                max_tokens=24,
                seed=7,
                temperature=0.8,
            )
            choice, usage = reply.choices[0], reply.usage
            return (
                f"{reply.model} answered ({choice.finish_reason}, "
                f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion "
                "tokens) — random weights, so the words are noise; the pipeline is real"
            )

        results.append(_step("model: chat completion with a tool declared", chat))

    with SandboxClient.from_settings(settings) as sandbox:

        def lifecycle() -> str:
            sb = sandbox.create("busybox", timeout=300)
            sid = sb.sandboxID
            try:
                out = sandbox.exec(sid, "echo hello from $(uname -n)").stdout.strip()
                sandbox.write_file(sid, "/tmp/demo.txt", "kept across pause\n")
                sandbox.pause(sid)
                paused = sandbox.get(sid).state
                sandbox.resume(sid)
                kept = sandbox.read_file(sid, "/tmp/demo.txt").decode().strip()
                cp = sandbox.checkpoint(sid)
            finally:
                sandbox.kill(sid)
            return (
                f"{sb.runtime} sandbox {sid}: exec said {out!r}; {paused} → "
                f"resumed, file {kept!r}; checkpoint {cp.id} stored {cp.bytes_stored:,} bytes"
            )

        results.append(_step("sandbox: create, exec, pause, resume, checkpoint", lifecycle))

    with ToolsClient.from_settings(settings) as tools:

        def scenario() -> str:
            name = "hr_onboarding"
            inst = tools.scenario(name, seed=1)
            acted = tools.create_world(name, seed=1)
            mail = (
                f"To: {inst.people[0].email if inst.people else inst.user.email}\r\n"
                "Subject: Onboarding\r\n\r\nOn it: I will prepare everything this week."
            )
            raw = base64.urlsafe_b64encode(mail.encode()).decode()
            tools.app(acted.id, acted.token or "", "POST", "gmail/v1/users/me/messages/send",
                      json={"raw": raw})  # fmt: skip
            idle = tools.create_world(name, seed=1)
            for world in (acted, idle):
                tools.advance(world.id, to=inst.end.isoformat(), timeout=120.0)
            one, nothing = tools.checks(acted.id), tools.checks(idle.id)
            return (
                f"{name}: {len(inst.events)} events over "
                f"{(inst.end - inst.start).days} simulated days; one polite mail passed "
                f"{one.events_passed}/{one.events_total}, "
                f"a do-nothing run {nothing.events_passed}/{nothing.events_total}"
            )

        results.append(_step("tools: a multi-day scenario, one mail vs doing nothing", scenario))

    with VerifierClient.from_settings(settings) as verifier:

        def job() -> str:
            created = verifier.create_job("echo", {"hello": "k3stack"})
            done = verifier.wait_job(created.id, timeout_s=30)
            return (
                f"job {done.id[:8]}… {done.status} through a Celery worker, "
                f"sha256 {done.result['sha256'][:12]}…"
            )

        results.append(_step("verifier: run a job through the queue", job))

    with OrchestratorClient.from_settings(settings) as orch:

        def platform() -> str:
            p = orch.platform()
            healthy = [s.service for s in p.services if s.healthy]
            return f"sees {len(healthy)}/{len(p.services)} other services healthy"

        results.append(_step("orchestrator: check the platform over HTTP", platform))
        results.append(
            _step(
                f"main job: {DEMO_SCENARIO} end to end, oracle policy, claude-code, microVM",
                lambda: _oracle_episode(orch, settings.data_dir),
            )
        )
        results.append(
            _step("main job: the same scenario driven by a model", lambda: _model_episode(orch))
        )
    return all(results)


def _wait_episode(orch: OrchestratorClient, episode_id: str, timeout_s: float) -> Episode:
    """The finished episode (its job polled with the shared backoff); cancelled on timeout."""
    try:
        orch.wait_job(episode_id, timeout_s, max_interval_s=1.0)
    except JobTimeout:
        orch.cancel_episode(episode_id)
        raise
    return orch.episode(episode_id)


def _oracle_episode(orch: OrchestratorClient, data_dir: Path) -> str:
    body = {
        "task": {"scenario": DEMO_SCENARIO, "seed": 1, "sandbox_template": "busybox"},
        "harness": "claude-code",
        "policy": {"kind": "oracle"},
    }
    ep = _wait_episode(orch, orch.create_episode(EpisodeCreate.model_validate(body)).id, 900)
    if ep.status != "succeeded":
        raise RuntimeError(f"episode {ep.id} {ep.status}: {ep.error_code} {ep.error_message}")
    table = Table(title=f"{DEMO_SCENARIO} (seed 1) — per-event score", show_lines=False)
    for column in ("event", "title", "verdict"):
        table.add_column(column)
    for r in ep.results:
        verdict = "[green]pass[/]" if r.passed else f"[red]{r.status}[/]"
        table.add_row(r.event_id, r.title or "", verdict)
    console.print(table)
    report = data_dir / "reports" / f"{ep.id}.html"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_bytes(orch.request("GET", f"/episodes/{ep.id}/report").content)
    return oracle_summary(ep, report)


def oracle_summary(ep: Episode, report: Path) -> str:
    """The oracle episode's line (``simulated_day`` is 1 on the first day: it is the count)."""
    return (
        f"episode {ep.id}: {ep.events_passed}/{ep.events_total} events, reward {ep.reward}, "
        f"{ep.step} steps over {ep.simulated_day} simulated days; report {report}"
    )


DEMO_TINY_HEADROOM = 600
"""Tokens between the tiny model's fixed context (system prompt, task, tool schemas) and
claude-code's compaction trigger in the demo: a few steps, so that compaction runs."""


def model_episode_body(env: Mapping[str, str]) -> dict[str, object]:
    """The model-driven episode's request: the tiny K3 model of the model service, or the
    endpoint named by ``K3STACK_DEMO_MODEL_URL`` (with ``_KEY`` and ``K3STACK_DEMO_MODEL``)."""
    url = env.get("K3STACK_DEMO_MODEL_URL")
    policy: dict[str, object] = {"kind": "openai"}
    if url:
        policy |= {"base_url": url, "api_key": env.get("K3STACK_DEMO_MODEL_KEY")}
        if env.get("K3STACK_DEMO_MODEL"):
            policy["model"] = env["K3STACK_DEMO_MODEL"]
    body: dict[str, object] = {
        "task": {"scenario": DEMO_SCENARIO, "seed": 1},
        "harness": "claude-code",
        "policy": policy,
        "budgets": {"max_steps": 200},
    }
    if not url:
        # A short episode that still compacts: the orchestrator holds the window just above
        # the fixed context (the scenario's 55 tool schemas, the system prompt and the task, as
        # the model service's tokenizer counts them), so that claude-code's trigger is
        # DEMO_TINY_HEADROOM tokens, a few steps, ahead whatever the prompt's size.
        # Random weights spend every token on reasoning and never call a tool, so the demo asks
        # for instruct mode and a required tool call (the model service's grammar makes the
        # turn a call of an offered tool; its arguments are noise, cut at the token budget,
        # and come back as error observations).
        body["budgets"] = {"max_steps": 10, "max_output_tokens": 96}
        body["policy"] = {**policy, "tool_choice": "required", "reasoning_effort": "none"}
        body["context_headroom"] = DEMO_TINY_HEADROOM
    return body


def _model_episode(orch: OrchestratorClient) -> str:
    url = os.environ.get("K3STACK_DEMO_MODEL_URL")
    body = model_episode_body(os.environ)
    ep = _wait_episode(orch, orch.create_episode(EpisodeCreate.model_validate(body)).id, 900)
    if ep.status != "succeeded" or ep.exit_reason == "policy_error":
        why = ep.error_message or ep.exit_detail or ep.exit_reason
        raise RuntimeError(f"episode {ep.id} {ep.status} ({ep.exit_reason}): {why}")
    who = url or "the tiny K3 model (random weights: its tool calls are noise)"
    return (
        f"episode {ep.id} with {who}: {ep.status} ({ep.exit_reason}), {ep.step} steps, "
        f"{ep.tokens} tokens, {ep.compactions} compactions, "
        f"{ep.events_passed}/{ep.events_total} events"
    )


def run_demo(data_dir: Path | None = None, keep: bool = False) -> int:
    """Start the stack detached, run the smoke flow, stop it (unless ``keep``)."""
    cli = [sys.executable, "-m", "shared.cli"]
    extra = ["--data-dir", str(data_dir)] if data_dir else []
    console.rule("k3stack demo")
    up = subprocess.run([*cli, "up", "--detach", *extra], check=False)
    if up.returncode != 0:
        console.print("[red]k3stack up failed[/]")
        return up.returncode
    if data_dir:
        os.environ["K3STACK_DATA_DIR"] = str(data_dir)
    try:
        ok = smoke()
    finally:
        if not keep:
            subprocess.run([*cli, "down", *extra], check=False)
    console.rule("[green]demo passed" if ok else "[red]demo failed")
    if keep:
        console.print("the platform is still running; stop it with `k3stack down`")
    return 0 if ok else 1
