"""The real Claude Code and Codex binaries (installed by scripts/setup_agents.sh), headless,
through the recording gateway to the model service (tiny model): their first requests are
accepted, their structure is what the committed fixture pins (text-free), and Codex's own
``apply_patch`` grammar constrains what the model samples for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xgrammar as xgr

from services.orchestrator.apply_patch import parse_patch
from services.orchestrator.installed.catalog import AGENTS
from tests.model.conftest import model_settings, running
from tests.orchestrator.cli_capture import TEXT, Run, run_cli, shape, stack

FIXTURE = Path(__file__).parent / "fixtures" / "cli_first_requests.json"
CORE_TOOLS = {"claude-code-cli": {"Bash", "Read", "Edit", "Write"}, "codex-cli": {"apply_patch"}}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """One invocation of each CLI (the slow part: 20K- and 15K-token prompts on the CPU)."""
    for preset in CORE_TOOLS:
        assert AGENTS[preset].installed(), f"{preset}: run scripts/setup_agents.sh"
    with stack() as s:
        return {
            preset: run_cli(s, preset, tmp_path_factory.mktemp(preset), timeout_s=420)
            for preset in CORE_TOOLS
        }


@pytest.fixture(scope="module")
def tiny_model():
    """The tiny model with its default (short) context."""
    from services.model.app import create_app

    with running(create_app(model_settings())) as server:
        yield server


def _strings(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def test_fixture_holds_no_vendor_text():
    """Only shape is committed: names and keys (no spaces, short) and the placeholder."""
    for s in _strings(json.loads(FIXTURE.read_text())):
        assert s == TEXT or (" " not in s and len(s) <= 64), s


@pytest.mark.parametrize("preset", list(CORE_TOOLS))  # the fixture's CLIs
def test_first_request_is_accepted_and_matches_the_fixture(runs, preset):
    run = runs[preset]
    assert run.steps, f"{preset} made no model call: {run.stderr[-2000:]}"
    first = run.steps[0]
    assert first["api"] == ("messages" if preset == "claude-code-cli" else "responses")
    assert first["status"] == 200, str(first.get("response"))[:600]
    # Later requests carry the tiny model's random answers and may outgrow its 32K context:
    # that, and only that, may be refused (a 400 naming the length, never a 5xx).
    refused = [(s["status"], str(s.get("response"))[:600]) for s in run.steps if s["status"] != 200]
    assert all(code == 400 and "context length" in body for code, body in refused), refused
    # The fields are pinned exactly; the tool set varies between runs of the same binary (its
    # feature gates), so each tool's kind must be one the fixture knows, and the core ones stay.
    pinned = json.loads(FIXTURE.read_text())[preset]
    got = shape(first["request"])
    assert got["fields"] == pinned["fields"]
    # (Codex groups some tools in a namespace behind a feature gate: flattened by the service)
    kinds = {(t["type"], t["format"]) for t in pinned["tools"]} | {("namespace", None)}
    assert {(t["type"], t["format"]) for t in got["tools"]} <= kinds, got["tools"]
    names = {t["name"] for t in got["tools"]}
    assert CORE_TOOLS[preset] <= names, names
    agent = AGENTS[preset]
    assert first["agent"] == f"{agent.package}@{agent.version}"
    kinds = [e.get("type") for e in first["events"] if isinstance(e, dict)]
    # the CLI's stdout is its own JSON lines, every one (no garbage), ending in its verdict
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    if preset == "claude-code-cli":
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert "thinking" not in first["request"] or first["request"]["thinking"]
        assert lines[-1]["type"] == "result"
    else:
        assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
        assert "web_search" in first["headers"]["warning"]  # the hosted tool, dropped
        assert lines[-1]["type"] == "turn.failed"
        assert "max_output_tokens" in lines[-1]["error"]["message"]  # the gateway's budget


def test_codex_apply_patch_grammar_constrains_every_sample(runs, tiny_model):
    """Codex's own freeform apply_patch tool (its Lark grammar, from the live request) offered
    to the tiny model: every finished input parses with the project's apply_patch parser, and
    every one cut off by the token budget is still a prefix the grammar accepts."""
    import httpx

    tool = next(t for t in runs["codex-cli"].steps[0]["request"]["tools"] if t["type"] == "custom")
    assert tool["name"] == "apply_patch" and tool["format"]["syntax"] == "lark"
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]))
    grammar = compiler.compile_grammar(xgr.Grammar.from_lark(tool["format"]["definition"]))
    for seed in range(4):
        r = httpx.post(
            tiny_model.url + "/v1/responses",
            json={
                "model": "k3-tiny", "input": "Add a file.", "tools": [tool],
                "tool_choice": {"type": "custom", "name": "apply_patch"},
                "reasoning": {"effort": "none"}, "max_output_tokens": 450, "seed": seed,
            },
            timeout=240,
        )  # fmt: skip
        assert r.status_code == 200, r.text
        call = r.json()["output"][-1]
        assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch"
        matcher = xgr.GrammarMatcher(grammar, terminate_without_stop_token=True)
        assert matcher.accept_string(call["input"]), call["input"][:200]
        if r.json()["status"] == "completed":
            assert parse_patch(call["input"])
    # Random weights rarely finish Codex's long grammar in 450 tokens; a finished patch is
    # checked by the parser above whenever one comes (tests/model/test_client_fidelity.py forces
    # one to close on a smaller patch grammar), and every cut one is a valid grammar prefix.
