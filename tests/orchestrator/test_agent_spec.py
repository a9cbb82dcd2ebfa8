"""The declarative installed-agent specs: every shipped spec loads, a bad one is refused naming
the field, the five CLIs' specs render exactly what the hand-written launch code did before
them (argv, environment, config files; captured at a950fdd), and setup reads the same pins."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from services.orchestrator.installed import launch, spec
from services.orchestrator.installed.catalog import AGENTS, ALL, NODE
from services.orchestrator.installed.launch import Endpoint, MCPServer, RenderError, invocation
from services.orchestrator.installed.parsers import PARSERS
from services.orchestrator.installed.spec import SpecError, load_specs, parse_spec

FIXTURE = Path(__file__).parent / "fixtures" / "agent_launch_before_specs.json"
SCRIPT = Path(__file__).parents[2] / "scripts" / "setup_agents.sh"
FIVE = ["claude-code-cli", "codex-cli", "kimi-code-cli", "openclaw-cli", "hermes-cli"]

GOOD = """
name: my-cli
preset: my-cli-cli
install: {kind: npm, package: "@me/my-cli", version: "1.2.3", binary: my}
wire_api: chat/completions
command:
  day: [run, "{prompt}", --model, "{model}", [--max-turns, "{max_turns}"]]
  resume: [run, "{prompt}", --resume, "{session_id}"]
env: {MY_BASE_URL: "{api_base}", MY_KEY: "{token}"}
files:
  .my/config.json:
    format: json
    content: {servers: "{mcp_servers}", window: "{context_window}", "limit?": "{max_turns}"}
mcp:
  key: "mcp__{name}"
  server: {url: "{url}", headers: "{headers}"}
output: {parser: json-lines, ends: [done]}
session: {event: started, field: id}
"""


def _bad(path: str, value, drop: bool = False) -> str:
    """GOOD with the field at dotted ``path`` set to ``value`` (or removed)."""
    data = yaml.safe_load(GOOD)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    if drop:
        del node[last]
    else:
        node[last] = value
    return yaml.safe_dump(data)


def test_every_shipped_spec_loads_and_names_its_harness():
    assert [a.preset for a in ALL] == list(AGENTS) and set(FIVE) <= set(AGENTS)
    assert {a.name for a in ALL} == {p.stem for p in spec.AGENTS_DIR.glob("*.yaml")}
    assert NODE.install.kind == "node" and NODE.version.startswith("26.")
    # the registries a spec names are the ones the code runs
    assert set(spec.PARSERS) == set(PARSERS) and set(spec.HOOKS) == set(launch.HOOKS)
    got = parse_spec(GOOD)
    assert (got.package, got.version, got.binary, got.kind) == ("@me/my-cli", "1.2.3", "my", "npm")


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("install.version", None, "install.version: Field required"),
        ("install.version", "latest", "install.version: String should match pattern"),
        ("install.kind", "brew", "install.kind: Input should be 'npm', 'pip' or 'node'"),
        ("install.node", "pinned", None),  # fine for npm
        ("wire_api", "gemini", "wire_api: Input should be 'messages', 'responses' or 'chat/"),
        ("output.parser", "xml", "output.parser: unknown parser 'xml'; known: json-lines"),
        ("output.ends", [], "output.ends: List should have at least 1 item"),
        ("command.day", [], "command.day: List should have at least 1 item"),
        ("hooks", ["make-coffee"], "hooks: unknown hook(s) ['make-coffee']"),
        ("files", {"/etc/passwd": {"format": "text", "content": ""}}, "'/etc/passwd': a path"),
        ("files", {"a.txt": {"format": "text", "content": {"x": 1}}}, "content: a text file"),
        ("files", {"a.toml": {"format": "ini", "content": {}}}, "files.a.toml.format: Input"),
        ("mcp.server", {"url": "{uri}"}, "mcp.server.url: unknown placeholder {uri}; known:"),
        ("env", {"X": "{promt}"}, "env.X: unknown placeholder {promt}"),
        ("session", {"event": "started"}, "session.field: Field required"),
        ("sesion", {"event": "x"}, "sesion: Extra inputs are not permitted"),
        ("name", "My CLI", "name: String should match pattern"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(path, value, named):
    text = _bad(path, value, drop=value is None)
    if named is None:
        assert parse_spec(text, "my.yaml").install.node == "pinned"
        return
    with pytest.raises(SpecError) as err:
        parse_spec(text, "my.yaml")
    assert str(err.value).startswith("my.yaml: ") and named in str(err.value), str(err.value)


def test_whole_spec_mistakes_are_named(tmp_path):
    with pytest.raises(SpecError, match=r"command.day\[1\]: unknown placeholder \{promt\}"):
        parse_spec(GOOD.replace('[run, "{prompt}"', '[run, "{promt}"'))
    with pytest.raises(SpecError, match=r"mcp: no file holds \{mcp_servers\}"):
        parse_spec(GOOD.replace('servers: "{mcp_servers}", ', ""))
    with pytest.raises(SpecError, match="install: node: pinned is for kind npm only"):
        parse_spec(_bad("install", {"kind": "pip", "package": "p", "version": "1",
                                    "binary": "p", "node": "pinned"}))  # fmt: skip
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_spec("name: [", "x.yaml")
    (tmp_path / "other.yaml").write_text(GOOD)
    with pytest.raises(SpecError, match=r"other.yaml: name: 'my-cli' differs from the file's"):
        load_specs(tmp_path)
    (tmp_path / "other.yaml").unlink()
    (tmp_path / "my-cli.yaml").write_text(GOOD)
    (tmp_path / "zz-cli.yaml").write_text(GOOD.replace("name: my-cli", "name: zz-cli"))
    with pytest.raises(SpecError, match="zz-cli.yaml: preset: 'my-cli-cli' is my-cli's too"):
        load_specs(tmp_path)


def test_templates_fill_types_groups_and_optional_keys(tmp_path):
    agent = parse_spec(GOOD)
    endpoint = Endpoint("http://gw/episodes/e/", "tok", "k3", 4096)
    mcp = [MCPServer("gmail", "http://t/mcp/gmail", {"Authorization": "Bearer w"})]
    day = invocation(agent, endpoint, tmp_path, tmp_path, "go", mcp=mcp)
    assert day.argv[1:] == ["run", "go", "--model", "k3"]  # no max_turns: the group is left out
    assert day.env["MY_BASE_URL"] == "http://gw/episodes/e/v1" and day.env["MY_KEY"] == "tok"
    written = json.loads((tmp_path / ".my" / "config.json").read_text())
    assert written == {"servers": {"mcp__gmail": {"url": "http://t/mcp/gmail",
                                                  "headers": {"Authorization": "Bearer w"}}},
                       "window": 4096}  # fmt: skip
    later = invocation(agent, endpoint, tmp_path, tmp_path, "on", "s-1", resume=True, max_turns=3)
    assert later.argv[1:] == ["run", "on", "--resume", "s-1"]
    assert json.loads((tmp_path / ".my" / "config.json").read_text())["limit"] == 3
    # resume without a reported session: the day command, a new session
    assert invocation(agent, endpoint, tmp_path, tmp_path, "x", None, resume=True).argv[2] == "x"
    broken = parse_spec(GOOD.replace('[run, "{prompt}", --model', '[run, "{session_id}", --model'))
    with pytest.raises(RenderError, match=r"command.day\[1\]: \{session_id\} is not set"):
        invocation(broken, endpoint, tmp_path, tmp_path, "go")


def _files(home: Path) -> dict[str, object]:
    """Each file parsed by its format (a TOML or JSON file compared by value, not spacing)."""
    out: dict[str, object] = {}
    for p in sorted(home.rglob("*")):
        if not p.is_file():
            continue
        text = p.read_text().replace(str(home), "<HOME>")
        name = str(p.relative_to(home))
        if p.suffix == ".toml":
            out[name] = tomllib.loads(text)
        elif p.suffix in (".json", ".yaml"):  # the YAML files are written as JSON
            out[name] = json.loads(text)
        else:
            out[name] = text
    return out


def _parsed(name: str, text: str) -> object:
    if name.endswith(".toml"):
        return tomllib.loads(text)
    if name.endswith((".json", ".yaml")):
        return json.loads(text)
    return text


CASES = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize(
    "case", CASES["cases"], ids=lambda c: "-".join(map(str, c["inputs"].values()))
)
def test_the_five_specs_render_what_the_old_launch_code_did(case, tmp_path, monkeypatch):
    monkeypatch.setattr(spec, "agents_dir", lambda: Path(CASES["agents_dir"]))
    i = case["inputs"]
    agent = AGENTS[i["preset"]]
    endpoint = Endpoint(**CASES["endpoint"])
    mcp = [MCPServer(**s) for s in CASES["mcp"]] if i["mcp"] else []
    home = tmp_path / "home"
    inv = invocation(
        agent, endpoint, home, Path("/root/work"), i["prompt"], i["session_id"],
        resume=i["resume"], mcp=mcp, max_turns=i["max_turns"], timeout_s=i["timeout_s"] or 3600,
        probes={h: CASES["bundled"] for h in agent.hooks},
    )  # fmt: skip
    h = str(home)
    assert [a.replace(h, "<HOME>") for a in inv.argv] == case["argv"]
    assert {k: v.replace(h, "<HOME>") for k, v in inv.env.items()} == case["env"]
    assert str(inv.cwd) == case["cwd"]
    assert (inv.parser == "text-session-line") == case["text_output"]
    before = {name: _parsed(name, text) for name, text in case["files"].items()}
    assert _files(home) == before


def test_setup_reads_the_pins_from_the_specs():
    """``setup_agents.sh --list`` prints what it read from the spec files: the catalogue's."""
    env = {**os.environ, "SKIP_AGENTS": "0"}
    done = subprocess.run(["bash", str(SCRIPT), "--list"], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = sorted(tuple(line.split()) for line in done.stdout.splitlines())
    want = [(a.kind, a.name, a.package, a.version, a.install.node) for a in ALL]
    want.append(("node", "node", NODE.package, NODE.version, "system"))
    assert listed == sorted(want)


def test_the_sixth_cli_is_its_spec_file_alone(tmp_path):
    """Qwen Code: its spec is all there is (no preset file, no code): its harness, command lines
    and settings come from the one file."""
    from services.orchestrator.harness.config import PRESETS_DIR, load_harness

    agent = AGENTS["qwen-code-cli"]
    assert not (PRESETS_DIR / "qwen-code-cli.yaml").exists()
    harness = load_harness("qwen-code-cli")
    assert harness.kind == "installed" and harness.budgets.steps_per_day == 60
    endpoint = Endpoint("http://gw/episodes/e", "tok", "k3", 32768)
    mcp = [MCPServer("gmail", "http://t/mcp/gmail", {"Authorization": "Bearer w"})]
    day = invocation(agent, endpoint, tmp_path, tmp_path, "Do it.", "u-1", mcp=mcp)
    assert day.argv[-3:] == ["--session-id", "u-1", "Do it."]
    assert day.env["OPENAI_BASE_URL"] == "http://gw/episodes/e/v1"
    assert day.env["PATH"].startswith(str(NODE.binary_path().parent))
    settings = json.loads((tmp_path / ".qwen" / "settings.json").read_text())
    assert settings["mcpServers"]["gmail"]["httpUrl"] == "http://t/mcp/gmail"
    assert settings["mcpServers"]["gmail"]["headers"] == {"Authorization": "Bearer w"}
    assert settings["tools"]["toolSearch"]["enabled"] is False
    later = invocation(agent, endpoint, tmp_path, tmp_path, "Next.", "u-1", resume=True, mcp=mcp)
    assert later.argv[-3:] == ["--resume", "u-1", "Next."]
