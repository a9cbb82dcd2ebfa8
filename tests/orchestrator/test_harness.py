"""Harness presets: YAML validated by pydantic (unknown key or wrong type -> an error naming the
key and the file), each preset's native tool names and compaction settings, the Jinja prompt,
skills, and ``k3stack harness new/show/list``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from services.orchestrator.cli import harness_app
from services.orchestrator.harness.config import (
    PRESET_NAMES,
    HarnessError,
    load_harness,
    load_harness_file,
    new_harness,
)
from services.orchestrator.harness.prompt import render_system_prompt
from services.orchestrator.skills import load_skills, parse_skill
from services.orchestrator.tools.builtin import CATALOGUE, UnknownTools, toolset_of

NATIVE = {
    "claude-code": {"Bash", "Read", "Write", "Edit", "TodoWrite", "Agent", "Skill"},
    "codex": {"exec_command", "apply_patch", "update_plan", "spawn_agent"},
    "kimi-code": {"Shell", "ReadFile", "WriteFile", "StrReplaceFile", "SetTodoList", "Agent"},
    "openclaw": {"read", "write", "edit", "apply_patch", "exec", "memory_search", "memory_get"},
    "hermes": {"terminal", "read_file", "write_file", "patch", "search_files", "todo", "memory",
               "skill_view", "delegate_task"},
}  # fmt: skip


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_presets_load_with_native_tool_names(preset: str) -> None:
    cfg = load_harness(preset)
    names = {CATALOGUE[k].name for k in cfg.tools}
    assert NATIVE[preset] <= names
    assert cfg.context.summary_sections
    prompt = render_system_prompt(
        cfg.system_prompt, environment={"cwd": "/root"}, memory={"AGENTS.md": "be brief"},
        skills=[{"name": "inbox-triage", "description": "mail"}], now="2026-03-02T09:00:00Z",
        reasoning_effort=cfg.reasoning_effort,
    )  # fmt: skip
    assert "2026-03-02T09:00:00Z" in prompt and "be brief" in prompt and "inbox-triage" in prompt


@pytest.mark.parametrize(("preset", "real"), [("claude-code", 6_882), ("codex", 26_496)])
def test_claude_code_and_codex_prompts_are_of_a_realistic_size(preset: str, real: int) -> None:
    """The real CLIs' system prompts (``k3stack harness compare``: 2.1.332, 0.171.0) are
    6,882 and 26,496 characters; the presets' own words come within reach (README)."""
    cfg = load_harness(preset)
    prompt = render_system_prompt(
        cfg.system_prompt, environment={}, memory={}, skills=[], now="2026-03-02T09:00:00Z",
        reasoning_effort=cfg.reasoning_effort,
    )  # fmt: skip
    assert 6_000 <= len(prompt) <= real, len(prompt)


def test_native_argument_names() -> None:
    def props(key: str) -> set[str]:
        return set(CATALOGUE[key].parameters["properties"])

    # the names the real CLIs' first requests carry (tests/orchestrator/fixtures)
    assert props("Read") == {"file_path", "offset", "limit", "pages"}
    assert {"skill", "args"} == props("Skill")
    assert {"description", "prompt", "subagent_type", "model", "run_in_background"} == props(
        "Agent"
    )
    assert props("Edit") == {"file_path", "old_string", "new_string", "replace_all"}
    assert {"command", "timeout", "description", "run_in_background"} == props("Bash")
    assert props("shell") == {"command", "workdir", "timeout_ms", "justification"}
    assert CATALOGUE["shell"].parameters["properties"]["command"]["type"] == "array"
    assert {"cmd", "workdir", "shell", "login", "yield_time_ms", "max_output_tokens"} <= props(
        "exec_command"
    )
    assert props("apply_patch") == {"input"}
    assert props("update_plan") == {"explanation", "plan"}
    assert props("ReadFile") == {"path", "line_offset", "n_lines"}
    assert props("StrReplaceFile") == {"path", "edit"}
    assert props("edit") == {"path", "oldText", "newText"}
    assert props("memory") == {"action", "target", "content", "old_text"}
    assert props("Agent@kimi") == {"description", "prompt", "subagent_type", "resume"}


@pytest.mark.parametrize(
    ("preset", "window", "threshold"),
    [
        ("claude-code", 200_000, 167_000),  # (window - min(max_out, 20k)) - 13k
        ("codex", 272_000, int(272_000 * 0.855)),  # 0.9 of the usable 95%
        ("kimi-code", 262_144, 262_144 - 50_000),  # min(0.85 x window, window - 50k)
        ("openclaw", 200_000, 180_000),  # window - 20k reserve
        ("hermes", 200_000, 150_000),  # 0.75 below 512K windows
    ],
)
def test_compaction_triggers_follow_the_harnesses(preset: str, window: int, threshold: int):
    assert load_harness(preset).context.trigger.threshold(window) == threshold


@pytest.mark.parametrize("preset", ["claude-code", "codex", "kimi-code", "openclaw", "hermes"])
@pytest.mark.parametrize("tokens", [1, 300, 13_377, 150_001])
def test_window_for_is_the_smallest_window_whose_trigger_reaches_the_tokens(preset, tokens):
    """The demo's window (``context_headroom``): compaction fires at ``tokens``, not before."""
    trigger = load_harness(preset).context.trigger
    window = trigger.window_for(tokens)
    assert trigger.threshold(window) >= tokens
    assert window == 256 or trigger.threshold(window - 1) < tokens


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_unknown_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(load_harness_path("codex")).read_text())
    data["context"]["trigger"]["fractoin"] = 0.5
    path = _write(tmp_path, data)
    with pytest.raises(HarnessError) as err:
        load_harness_file(path)
    assert str(path) in str(err.value) and "context.trigger.fractoin" in str(err.value)


def test_wrong_type_names_the_key_and_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(load_harness_path("hermes")).read_text())
    data["budgets"]["max_steps"] = "many"
    path = _write(tmp_path, data)
    with pytest.raises(HarnessError) as err:
        load_harness_file(path)
    assert str(path) in str(err.value) and "budgets.max_steps" in str(err.value)


def test_unknown_tool_and_bad_yaml(tmp_path: Path) -> None:
    """The harness only names its tools: the catalogue resolves the names and rejects an
    unknown one, naming it and the known ones; a repeated name is the harness's own error."""
    data = yaml.safe_load(Path(load_harness_path("claude-code")).read_text())
    data["tools"].append("Teleport")
    cfg = load_harness_file(_write(tmp_path, data))
    with pytest.raises(UnknownTools, match="Teleport") as err:
        toolset_of(cfg.tools)
    assert "Bash" in str(err.value)
    assert toolset_of(load_harness("claude-code").tools).names()[0] == "Bash"
    data["tools"][-1] = "Bash"
    with pytest.raises(HarnessError, match="listed twice"):
        load_harness_file(_write(tmp_path, data))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(HarnessError, match="not valid YAML"):
        load_harness_file(bad)


def load_harness_path(name: str) -> str:
    from services.orchestrator.harness.config import harness_path

    return str(harness_path(name))


def test_cli_new_show_list(tmp_path: Path, monkeypatch) -> None:
    from shared.settings import get_settings

    tmp_path = tmp_path / ("a-data-dir-deeper-than-a-terminal-is-wide-" * 2)  # no wrapped comment
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    runner = CliRunner()
    made = runner.invoke(harness_app, ["new", "my-codex", "--from", "codex"])
    assert made.exit_code == 0, made.output
    path = tmp_path / "harnesses" / "my-codex.yaml"
    assert path.exists()
    again = runner.invoke(harness_app, ["new", "my-codex", "--from", "codex"])
    assert again.exit_code == 1 and "already exists" in again.output
    shown = runner.invoke(harness_app, ["show", "my-codex"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith(f"# {path}\n")
    body = yaml.safe_load(shown.output)  # the whole output is YAML: `show X > x.yaml` works
    assert body["name"] == "my-codex" and body["based_on"] == "codex"
    assert body["budgets"]["tool_timeout_s"] == 120.0  # defaults resolved
    listed = runner.invoke(harness_app, ["list"])
    assert all(n in listed.output for n in [*PRESET_NAMES, "my-codex"])
    # an edit with a typo is reported with the key and the file
    data = yaml.safe_load(path.read_text())
    data["reasoning_effort"] = "extreme"
    path.write_text(yaml.safe_dump(data))
    broken = runner.invoke(harness_app, ["show", "my-codex"])
    assert broken.exit_code == 1
    assert "reasoning_effort" in broken.output and str(path) in broken.output  # one piece
    assert runner.invoke(harness_app, ["show", "nope"]).exit_code == 1
    marked = runner.invoke(harness_app, ["show", "[bold]nope"])  # text, not rich markup
    assert marked.exit_code == 1 and "[bold]nope" in marked.output
    with pytest.raises(HarnessError):
        new_harness("bad name!", "codex", tmp_path)


def test_entry_points_are_declared_and_load() -> None:
    import tomllib

    from services.orchestrator import cli

    repo = Path(__file__).resolve().parents[2]
    eps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["entry-points"]
    group = eps["k3stack.cli"]
    assert group["run"] == "services.orchestrator.cli:run" and callable(cli.run)
    assert group["harness"] == "services.orchestrator.cli:harness_app"


def test_skills_load_and_validate(tmp_path: Path) -> None:
    skills = load_skills()
    assert {"inbox-triage", "world-clock"} <= set(skills)
    assert skills["inbox-triage"]["body"].startswith("1.")
    with pytest.raises(ValueError, match="frontmatter"):
        parse_skill("no frontmatter", "x/SKILL.md")
    with pytest.raises(ValueError, match="name"):
        parse_skill("---\nname: ''\ndescription: d\n---\nbody", "x/SKILL.md")


def test_the_harness_never_imports_the_tool_catalogue() -> None:
    """The arrow points one way: tools know nothing of harnesses and the harness modules import
    nothing from tools/ (statically, and nothing drags it in at run time either)."""
    import subprocess
    import sys

    from tests.contract.test_layering import imported_modules

    root = Path(__file__).resolve().parents[2]
    harness_dir = root / "services" / "orchestrator" / "harness"
    found = [
        f"{path.name}:{line} imports {mod}"
        for path in sorted(harness_dir.rglob("*.py"))
        for line, mod in imported_modules(path, root)
        if mod.startswith("services.orchestrator.tools")
    ]
    assert not found, found
    probe = (
        "import sys; from services.orchestrator.harness.config import load_harness; "
        "load_harness('claude-code'); "
        "print(sorted(m for m in sys.modules if m.startswith('services.orchestrator.tools')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout
