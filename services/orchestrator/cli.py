"""``k3stack run`` and ``k3stack harness``: registered through the ``k3stack.cli`` entry points.

``k3stack run --scenario NAME --harness PRESET [--policy oracle|URL]`` submits an episode to the
orchestrator service and follows it live (simulated day, step, tokens, compactions, events
passed), ending with the per-event score table and the report's address.
``k3stack harness new NAME --from PRESET`` copies a preset into ``<data dir>/harnesses`` to edit;
``show`` prints the resolved configuration (validated); ``list`` lists presets and your own.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from services.orchestrator.cli_fail import fail
from services.orchestrator.harness.config import (
    HarnessError,
    harness_path,
    list_harnesses,
    load_harness,
    new_harness,
)
from services.orchestrator.tools.builtin import UnknownTools, check_tool_names
from shared.settings import get_settings

console = Console()
harness_app = typer.Typer(
    help="Harness configurations: presets and your own.", add_completion=False
)


@harness_app.command("list")
def harness_list() -> None:
    """Presets and the harnesses in your data dir."""
    from services.orchestrator.installed.catalog import install_status

    table = Table("name", "where", "description")
    table.add_column("installed", no_wrap=True)
    data_dir = get_settings().data_dir
    for name, where in list_harnesses(data_dir):
        try:
            cfg = load_harness(name, data_dir)
            check_tool_names(cfg.tools)
            desc = cfg.description
        except (HarnessError, UnknownTools, KeyError) as exc:
            desc = f"[red]invalid: {exc}[/red]"
        table.add_row(name, where, desc, install_status(name))
    console.print(table)


@harness_app.command("show")
def harness_show(name: str) -> None:
    """The resolved configuration of NAME (every default filled in), as YAML."""
    data_dir = get_settings().data_dir
    try:
        cfg = load_harness(name, data_dir)
        check_tool_names(cfg.tools)
        where = harness_path(name, data_dir)
    except (HarnessError, UnknownTools, KeyError) as exc:
        fail(str(exc.args[0] if isinstance(exc, KeyError) else exc))
        return
    # soft_wrap: a long path stays one comment line, so the whole output is YAML
    console.print(f"# {where}", style="dim", highlight=False, soft_wrap=True)
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, width=100), end="")


@harness_app.command("new")
def harness_new(
    name: str,
    from_: Annotated[
        str, typer.Option("--from", help="Preset (or harness) to copy.")
    ] = "claude-code",
) -> None:
    """Copy a preset to <data dir>/harnesses/NAME.yaml to edit."""
    try:
        path = new_harness(name, from_, get_settings().data_dir)
    except (HarnessError, KeyError) as exc:
        fail(str(exc.args[0] if isinstance(exc, KeyError) else exc))
        return
    console.print(f"wrote {path}")


def _policy(policy: str, model: str | None, api_key: str | None) -> dict[str, Any]:
    if policy == "oracle":
        return {"kind": "oracle"}
    if policy in ("model", "default"):
        return {"kind": "openai", "model": model}
    return {"kind": "openai", "base_url": policy, "model": model, "api_key": api_key}


def _view(ep: Any) -> Table:
    table = Table(show_header=False, box=None)
    table.add_row("episode", ep.id)
    table.add_row("status", ep.status)
    table.add_row("simulated day", str(ep.simulated_day))
    table.add_row("world clock", ep.world_clock or "—")
    table.add_row("step", str(ep.step))
    table.add_row("tokens", str(ep.tokens))
    table.add_row("compactions", str(ep.compactions))
    passed = "—" if ep.events_total is None else f"{ep.events_passed}/{ep.events_total}"
    table.add_row("events passed", passed)
    if ep.exit_reason:
        table.add_row("ended", ep.exit_reason + (f": {ep.exit_detail}" if ep.exit_detail else ""))
    if ep.error_message:
        table.add_row("error", f"{ep.error_code}: {ep.error_message}")
    return table


def score_table(ep: Any) -> Table:
    table = Table("event", "title", "checks", "verdict", title="per-event score")
    for r in ep.results:
        ok = sum(1 for c in r.checks if c.get("passed"))
        verdict = "[green]pass[/green]" if r.passed else "[red]fail[/red]"
        table.add_row(r.event_id, (r.title or "")[:60], f"{ok}/{len(r.checks)}", verdict)
    return table


def run(
    scenario: Annotated[str | None, typer.Option(help="Tools-service scenario.")] = None,
    seed: Annotated[int, typer.Option(help="Scenario seed.")] = 0,
    harness: Annotated[str, typer.Option(help="Preset or your harness.")] = "claude-code",
    policy: Annotated[
        str, typer.Option(help="oracle, model (the model service) or a URL.")
    ] = "model",
    model: Annotated[str | None, typer.Option(help="Model name at the endpoint.")] = None,
    api_key: Annotated[str | None, typer.Option(help="Key for a policy URL.")] = None,
    instruction: Annotated[
        str | None, typer.Option(help="A free task instead of / with a scenario.")
    ] = None,
    sandbox: Annotated[
        str | None, typer.Option(help="Sandbox template for shell/file tools.")
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step budget.")] = None,
    poll_s: Annotated[float, typer.Option(help="Refresh interval.")] = 0.5,
) -> None:
    """Run an episode on the orchestrator and follow it live."""
    from shared.clients import OrchestratorClient, ServiceError

    body: dict[str, Any] = {
        "task": {"scenario": scenario, "seed": seed, "instruction": instruction,
                 "sandbox_template": sandbox},
        "harness": harness,
        "policy": _policy(policy, model, api_key),
    }  # fmt: skip
    if max_steps:
        body["budgets"] = {"max_steps": max_steps}
    client = OrchestratorClient.from_settings(get_settings())
    try:
        ep = client.create_episode(body)
        with Live(_view(ep), console=console, refresh_per_second=4) as live:
            while ep.status in ("queued", "running"):
                time.sleep(poll_s)
                ep = client.episode(ep.id)
                live.update(_view(ep))
    except ServiceError as exc:
        fail(str(exc))
        return
    finally:
        client.close()
    if ep.results:
        console.print(score_table(ep))
    if ep.reward is not None:
        console.print(
            f"reward [bold]{ep.reward:.3f}[/bold] ({ep.events_passed}/{ep.events_total} events)"
        )
    console.print(f"report: {client.base_url}/episodes/{ep.id}/report")
    if ep.status != "succeeded":
        fail(f"episode {ep.status}: {ep.error_message or ep.exit_reason}")
    if ep.exit_reason == "policy_error":
        fail(f"the policy kept failing: {ep.exit_detail}")


@harness_app.command("compare")
def harness_compare(
    white: Annotated[str, typer.Argument(help="A white-box preset, e.g. claude-code.")],
    real: Annotated[str, typer.Argument(help="Its installed agent, e.g. claude-code-cli.")],
    scenario: Annotated[str, typer.Option(help="Tools-service scenario.")] = "hr_onboarding",
    seed: Annotated[int, typer.Option(help="Scenario seed.")] = 0,
    poll_s: Annotated[float, typer.Option(help="Refresh interval.")] = 1.0,
) -> None:
    """Run WHITE and REAL with the oracle on SCENARIO and print their fingerprints side by side."""
    from shared.clients import OrchestratorClient, ServiceError

    client = OrchestratorClient.from_settings(get_settings())
    rows: list[dict[str, Any]] = []
    try:
        for name in (white, real):
            ep = client.create_episode(
                {"task": {"scenario": scenario, "seed": seed}, "harness": name,
                 "policy": {"kind": "oracle"}}
            )  # fmt: skip
            while ep.status in ("queued", "running"):
                time.sleep(poll_s)
                ep = client.episode(ep.id)
            if ep.status != "succeeded":
                fail(f"{name}: episode {ep.status}: {ep.error_message or ep.exit_reason}")
            row = client.get_json(f"/episodes/{ep.id}/fidelity")["rows"]
            row["events passed"] = f"{ep.events_passed}/{ep.events_total}"
            rows.append(row)
    except ServiceError as exc:
        fail(str(exc))
        return
    finally:
        client.close()
    table = Table("", white, real, title=f"{white} vs {real} on {scenario} (oracle)")
    for key in rows[0]:
        table.add_row(key, str(rows[0][key]), str(rows[1].get(key)))
    console.print(table)
