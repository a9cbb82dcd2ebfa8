"""Every preset's advertised tool schemas are valid JSON Schema whose ``required`` lists only
properties it declares, and a call built from each schema passes the tool's own argument
model and the executor, which receives that model (sandbox tools against a recording stand-in)."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from services.orchestrator.harness.config import PRESET_NAMES, load_harness
from services.orchestrator.tools.base import ToolFailure
from services.orchestrator.tools.builtin import CATALOGUE, ToolContext


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        target: Any = root
        for part in path:
            target = target[part]
        node = target
    return node


def example(node: dict[str, Any], root: dict[str, Any]) -> Any:
    """An instance of ``node``: every property filled, enums at their first value."""
    node = _resolve(node, root)
    if "enum" in node:
        return node["enum"][0]
    if "const" in node:
        return node["const"]
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [o for o in node[key] if _resolve(o, root).get("type") != "null"]
            return example(options[0], root)
    kind = node.get("type", "object")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = node.get("properties", {})
        return {k: example(v, root) for k, v in props.items()}
    if kind == "array":
        return [example(node.get("items", {}), root) for _ in range(node.get("minItems", 1))]
    if kind == "string":
        return "x" * max(1, node.get("minLength", 1))
    if kind in ("integer", "number"):
        return max(1, node.get("minimum", 1), node.get("exclusiveMinimum", 0) + 1)
    if kind == "boolean":
        return True
    raise AssertionError(f"no example for {node}")


def required_declared(node: Any, where: str) -> list[str]:
    """Every object schema's ``required`` names, missing from its ``properties``."""
    bad: list[str] = []
    if isinstance(node, dict):
        if "required" in node:
            missing = set(node["required"]) - set(node.get("properties", {}))
            bad += [f"{where}: {sorted(missing)}"] if missing else []
        for k, v in node.items():
            bad += required_declared(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            bad += required_declared(v, f"{where}/{i}")
    return bad


CASES = [(p, t) for p in PRESET_NAMES for t in load_harness(p).tools]


@pytest.mark.parametrize(("preset", "key"), CASES, ids=[f"{p}:{t}" for p, t in CASES])
def test_every_advertised_schema_is_valid_and_satisfiable(preset: str, key: str) -> None:
    tool = CATALOGUE[key]
    schema = tool.spec()["function"]["parameters"]
    Draft202012Validator.check_schema(schema)
    assert schema.get("type") == "object"
    assert required_declared(schema, tool.name) == []
    args = example(schema, schema)
    Draft202012Validator(schema).validate(args)
    validated = tool.validate(args)  # the executor's own argument model accepts it
    assert type(validated) is tool.args_model  # and the executor gets the model, not a dict
    ctx = ToolContext(sandbox=RecordingSandbox(), sandbox_id="sb", scratch={},
                      subagent=lambda kind, prompt: f"{kind} did {prompt}")  # fmt: skip
    try:
        out = tool.run(ctx, validated)
    except ToolFailure as exc:  # an observation for the agent (an unknown skill, say)
        out = f"Error: {exc}"
    assert isinstance(out, str) and out


class RecordingSandbox:
    """A stand-in for the sandbox client (the executors' contract, not the service's): every
    file holds ``x``, every command succeeds."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def exec(self, sandbox_id: str, command: Any, timeout: float, cwd: str) -> dict[str, Any]:
        return {"stdout": f"ran {command}", "stderr": "", "exit_code": 0, "duration_ms": 1}

    def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self.files.get(path, "x").encode()

    def write_file(self, sandbox_id: str, path: str, text: str) -> None:
        self.files[path] = text

    def remove(self, sandbox_id: str, path: str) -> None:
        self.files.pop(path, None)


def test_a_property_named_title_stays_in_the_schema() -> None:
    """Kimi Code's SetTodoList items have a ``title`` property; the schema lists it."""
    item = CATALOGUE["SetTodoList"].parameters["$defs"]["KimiTodo"]
    assert "title" in item["properties"] and "title" in item["required"]


def test_every_world_tool_schema_is_valid_and_satisfiable(services) -> None:
    """The world's app tools (the tools service's MCP ``tools/list``) as every preset names
    them: valid JSON Schema, ``required`` within ``properties``, a generated call valid."""
    from services.orchestrator.tools.mcp import WorldMCP, scenario_apps, world_tools

    tools = services.tools
    scenario = tools.scenario("hr_onboarding", 1).model_dump(mode="json")
    created = tools.create_world("hr_onboarding", 1)
    mcp = WorldMCP(tools, created.id, created.token)
    try:
        for preset in PRESET_NAMES:
            found = world_tools(mcp, scenario_apps(scenario), load_harness(preset).mcp_tool_name)
            assert len(found) >= 20
            for tool in found:
                schema = tool.spec()["function"]["parameters"]
                Draft202012Validator.check_schema(schema)
                assert required_declared(schema, tool.name) == []
                Draft202012Validator(schema).validate(example(schema, schema))
    finally:
        mcp.close()
        tools.delete_world(created.id)
