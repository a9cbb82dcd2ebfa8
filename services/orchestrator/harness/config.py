"""A harness is a configuration of modules; this is its schema and its loader.

Presets are YAML files under ``presets/``; a user's own harnesses are YAML files under
``<data dir>/harnesses`` (``k3stack harness new NAME --from PRESET`` copies a preset there). An
installed agent CLI without a preset file of its name has its harness in its agent spec
(``services/orchestrator/installed/agents/<name>.yaml``, its ``harness:`` mapping).
Every model forbids unknown keys, so a typo or a wrong type is an error naming the key and the
file, never a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from services.orchestrator.installed.catalog import AGENTS
from services.orchestrator.installed.spec import AGENTS_DIR

PRESETS_DIR = Path(__file__).parent / "presets"
PRESET_NAMES = ("claude-code", "codex", "kimi-code", "openclaw", "hermes")
# the real CLIs (services/orchestrator/installed), run as they are, one per agent spec; prompt
# and tools here are their white-box counterpart's, for `k3stack harness compare`
INSTALLED_NAMES = tuple(AGENTS)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Trigger(_Strict):
    """When to compact: tokens >= fraction x window, or tokens + reserve >= window.

    ``reserve_cap_fraction`` caps the reserve at that share of the window (OpenClaw: a quarter),
    so a preset written for a 200K window still behaves on a small one.
    """

    fraction: float | None = Field(None, gt=0, le=1)
    reserve_tokens: int | None = Field(None, ge=0)
    reserve_cap_fraction: float = Field(0.25, gt=0, le=1)

    @model_validator(mode="after")
    def _some(self) -> Trigger:
        if self.fraction is None and self.reserve_tokens is None:
            raise ValueError("give fraction, reserve_tokens, or both")
        return self

    def threshold(self, window: int) -> int:
        """The token count at which compaction fires for a context window of ``window``."""
        limits = []
        if self.fraction is not None:
            limits.append(int(window * self.fraction))
        if self.reserve_tokens is not None:
            reserve = min(self.reserve_tokens, int(window * self.reserve_cap_fraction))
            limits.append(window - reserve)
        return min(limits)

    def window_for(self, tokens: int) -> int:
        """The smallest window (at least 256) whose threshold is ``tokens`` or more: the
        threshold never falls as the window grows, so a bisection finds it."""
        lo, hi = 256, max(256, tokens)
        while self.threshold(hi) < tokens:
            hi *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            if self.threshold(mid) >= tokens:
                hi = mid
            else:
                lo = mid + 1
        return lo


class Keep(_Strict):
    """What survives a compaction verbatim (besides the system prompt)."""

    head_messages: int = Field(0, ge=0, description="First messages after the system prompt.")
    tail_messages: int = Field(0, ge=0, description="At least this many newest messages.")
    tail_user_turns: int = Field(0, ge=0, description="Newest user turns with their replies.")
    tail_fraction: float = Field(
        0.0, ge=0, le=0.5, description="Newest messages up to this share of the window."
    )
    task: bool = Field(False, description="The first user message (the task) stays verbatim.")
    latest_user: bool = Field(
        False, description="The newest user message (a clock notice) is restated after a summary."
    )


class ContextPolicy(_Strict):
    policy: Literal["summary", "masking", "clearing", "hybrid", "none"] = "summary"
    window: int = Field(200_000, ge=256, description="Context window when the model gives none.")
    trigger: Trigger = Field(default_factory=lambda: Trigger(fraction=0.85))
    keep: Keep = Field(default_factory=Keep)
    summary_prompt: str = "Summarise the conversation so far so that the work can continue."
    summary_sections: list[str] = Field(default_factory=list)
    summary_prefix: str = "Previous context has been compacted. Summary:\n"
    summary_role: Literal["user", "system"] = "user"
    placeholder: str = "[Old tool output cleared to save context space]"
    clear_min_chars: int = Field(200, ge=0, description="Clearing: outputs longer than this.")
    keep_tool_results: int = Field(3, ge=0, description="Masking/clearing: newest results kept.")
    summary_every: int = Field(
        3, ge=1, description="Hybrid: every Nth compaction (or when masking is not enough)."
    )
    max_failures: int = Field(3, ge=1, description="Stop compacting after this many failures.")


class Budgets(_Strict):
    max_steps: int = Field(200, ge=1, description="Model calls per episode.")
    max_tokens: int = Field(2_000_000, ge=1, description="Prompt + completion tokens in all.")
    max_wall_s: float = Field(3600.0, gt=0)
    steps_per_day: int = Field(40, ge=1, description="Model calls before the clock moves on.")
    max_output_tokens: int = Field(4096, ge=1)
    tool_timeout_s: float = Field(120.0, gt=0)


class Subagent(_Strict):
    description: str = ""
    tools: list[str] | None = Field(None, description="Allowed tools (None: the parent's).")
    max_steps: int = Field(20, ge=1)
    system_prompt: str = "You are a sub-agent. Do the task you are given and report the result."


class HarnessConfig(_Strict):
    name: str = Field(min_length=1, max_length=64)
    based_on: str | None = None
    description: str = ""
    kind: Literal["white-box", "installed"] = Field(
        "white-box",
        description="white-box: the platform's own loop; installed: the real CLI named by the "
        "preset (services/orchestrator/installed/catalog.py), its model calls recorded.",
    )
    system_prompt: str = Field(description="Template file under prompts/ (or inline Jinja).")
    tools: list[str] = Field(
        description="Native tool names; the tool catalogue (services/orchestrator/tools) resolves "
        "them, the harness only names them."
    )
    mcp_tool_name: str = Field(
        "{tool}", description="How world app tools are named: {server} and {tool}."
    )
    mcp_name_underscores: bool = Field(
        False, description="Hyphens in world tool names become underscores (as Codex names them)."
    )
    memory_files: list[str] = Field(default_factory=list)
    memory_max_chars: int = Field(25_000, ge=0)
    skills_dirs: list[str] = Field(default_factory=list)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    context: ContextPolicy = Field(default_factory=ContextPolicy)
    budgets: Budgets = Field(default_factory=Budgets)
    subagents: dict[str, Subagent] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _checked(self) -> HarnessConfig:
        repeated = sorted({t for t in self.tools if self.tools.count(t) > 1})
        if repeated:
            raise ValueError(f"tools listed twice: {repeated}")
        if "{tool}" not in self.mcp_tool_name:
            raise ValueError("mcp_tool_name must contain {tool}")
        from services.orchestrator.harness.prompt import check_template

        problem = check_template(self.system_prompt)
        if problem:
            raise ValueError(f"system_prompt: {problem}")
        return self


class HarnessError(ValueError):
    """A harness file that does not validate; the message names the file and the keys."""


def parse_harness(text: str, source: str) -> HarnessConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HarnessError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{source}: expected a mapping at the top level")
    try:
        return HarnessConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        )
        raise HarnessError(f"{source}: {problems}") from None


def _spec_harness(preset: str) -> dict:
    """The harness an agent spec carries: the real CLI as it is (its own prompt and tools)."""
    agent = AGENTS[preset]
    return {
        "name": preset, "kind": "installed", "description": agent.description,
        "system_prompt": "(the real CLI's own system prompt)", "tools": [],
        "mcp_tool_name": "mcp__{server}__{tool}", **(agent.harness or {}),
    }  # fmt: skip


def _harness_text(path: Path) -> str:
    if path.parent == AGENTS_DIR:  # an agent spec: its harness
        preset = next(p for p, a in AGENTS.items() if a.name == path.stem)
        return yaml.safe_dump(_spec_harness(preset), sort_keys=False)
    return path.read_text()


def load_harness_file(path: Path) -> HarnessConfig:
    return parse_harness(_harness_text(path), str(path))


def user_dir(data_dir: Path) -> Path:
    return data_dir / "harnesses"


def harness_path(name: str, data_dir: Path | None = None) -> Path:
    """A user's harness shadows a preset of the same name."""
    if data_dir is not None:
        mine = user_dir(data_dir) / f"{name}.yaml"
        if mine.exists():
            return mine
    preset = PRESETS_DIR / f"{name}.yaml"
    if preset.exists():
        return preset
    if name in AGENTS:
        return AGENTS_DIR / f"{AGENTS[name].name}.yaml"
    raise KeyError(f"unknown harness {name!r}; presets: {', '.join(PRESET_NAMES)}")


def load_harness(name: str, data_dir: Path | None = None) -> HarnessConfig:
    return load_harness_file(harness_path(name, data_dir))


def list_harnesses(data_dir: Path | None = None) -> list[tuple[str, str]]:
    """(name, where) for every preset and user harness."""
    out = [(n, "preset") for n in PRESET_NAMES] + [(n, "installed") for n in INSTALLED_NAMES]
    if data_dir is not None and user_dir(data_dir).is_dir():
        out += [(p.stem, str(p)) for p in sorted(user_dir(data_dir).glob("*.yaml"))]
    return out


def new_harness(name: str, preset: str, data_dir: Path) -> Path:
    """Copy ``preset`` to the user's harness folder as ``name`` (refuses to overwrite)."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise HarnessError(f"harness name {name!r}: use letters, digits, '-' and '_'")
    source = harness_path(preset, data_dir)
    target = user_dir(data_dir) / f"{name}.yaml"
    if target.exists():
        raise HarnessError(f"{target}: already exists")
    data = yaml.safe_load(_harness_text(source))
    data["name"] = name
    data["based_on"] = preset
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    parse_harness(text, str(target))
    target.write_text(text)
    return target
