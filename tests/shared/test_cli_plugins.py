"""Services add ``k3stack`` subcommands through the ``k3stack.cli`` entry-point group; shared/cli.py
finds them from installed metadata, without importing any service. A throwaway distribution on
sys.path stands in for an installed service package."""

from __future__ import annotations

import sys
import textwrap

import pytest
from typer.testing import CliRunner

from shared.cli import app, plugin_entry_points

PLUGIN = '''
import click
import typer

app = typer.Typer(help="Run episodes.")


@app.command()
def start(task: str, seed: int = 0) -> None:
    """Start an episode."""
    print(f"episode {task} seed {seed}")


@app.command()
def stop() -> None:
    print("stopped")


def verify(path: str) -> None:
    """Verify one submission."""
    print(f"verified {path}")


@click.command()
def harness() -> None:
    """List harness presets."""
    click.echo("codex claude_code")


settings = "shadows a built-in"
'''
ENTRY_POINTS = """
[k3stack.cli]
fake-run = k3stack_fake_plugin:app
fake-verify = k3stack_fake_plugin:verify
fake-harness = k3stack_fake_plugin:harness
settings = k3stack_fake_plugin:settings
broken = k3stack_fake_plugin_missing:app
"""


@pytest.fixture
def fake_plugin(tmp_path, monkeypatch):
    (tmp_path / "k3stack_fake_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "k3stack_fake_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: k3stack-fake-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("k3stack_fake_plugin", None)


def test_registered_commands_run(fake_plugin):
    # fake-* names: the real services register run, verify and harness themselves.
    assert {"fake-run", "fake-verify", "fake-harness", "broken"} <= set(plugin_entry_points())
    runner = CliRunner()
    out = runner.invoke(app, ["fake-run", "start", "fix-test", "--seed", "3"])
    assert out.exit_code == 0, out.output
    assert "episode fix-test seed 3" in out.output
    out = runner.invoke(app, ["fake-verify", "sub.tar"])
    assert out.exit_code == 0 and "verified sub.tar" in out.output
    out = runner.invoke(app, ["fake-harness"])
    assert out.exit_code == 0 and "codex claude_code" in out.output


def test_help_lists_them_and_builtins_win_a_clash(fake_plugin):
    out = CliRunner().invoke(app, ["--help"])
    assert out.exit_code == 0
    for name in ("up", "down", "fake-run", "fake-verify", "fake-harness"):
        assert name in out.output
    listed = CliRunner().invoke(app, ["settings"])  # the built-in, not the plugin's string
    assert listed.exit_code == 0 and "K3STACK_MODE" in listed.output


def test_a_broken_plugin_names_itself_and_leaves_the_rest_working(fake_plugin):
    out = CliRunner().invoke(app, ["broken"])
    assert out.exit_code != 0
    assert "'broken' command (k3stack_fake_plugin_missing:app) failed to load" in out.output
    assert CliRunner().invoke(app, ["fake-verify", "x"]).exit_code == 0


def test_cli_import_loads_no_plugin(fake_plugin):
    plugin_entry_points()
    assert "k3stack_fake_plugin" not in sys.modules  # loaded only when used
