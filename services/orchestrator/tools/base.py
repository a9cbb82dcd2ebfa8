"""What a tool is to the loop: a name, a JSON schema, an executor, and whether it has effects.

Executors return the observation text; a :class:`ToolFailure` (bad arguments, a sandbox
error, a timeout) becomes an error observation, never an exception out of the loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

# none: reads only; state: the episode's own state; sandbox / world: side effects outside the
# episode (journalled under an idempotency key; subagents count as world: their calls do)
Effect = Literal["none", "sandbox", "world", "state"]


class ToolFailure(Exception):
    """A tool call that failed in a way the agent should see."""


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    # an executor gets its validated ``args_model`` instance (a tool without one: the dict)
    run: Callable[[Any, Any], str]
    effect: Effect = "none"
    args_model: type[BaseModel] | None = None
    source: str = ""  # "app/tool" for world tools

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools[]`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate(self, arguments: dict[str, Any]) -> BaseModel | dict[str, Any]:
        """The arguments as the executor takes them: an instance of ``args_model`` (the
        executor reads typed fields, never a dict), or the dict when the tool has none (a
        world tool: the tools service validates its own arguments)."""
        if self.args_model is None:
            return arguments
        try:
            return self.args_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolFailure(f"invalid arguments for {self.name}: {problems}") from None


@dataclass
class ToolSet:
    tools: dict[str, Tool] = field(default_factory=dict)

    def add(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools.values()]

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def names(self) -> list[str]:
        return list(self.tools)


_NAME_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model's JSON schema as a tool's ``parameters`` (no titles)."""
    schema = model.model_json_schema(by_alias=True)

    def strip(node: Any, names: bool = False) -> Any:
        """Drop the ``title`` annotation of every schema node; inside a map of names to
        schemas (``properties``, ``$defs``) every key is a name, ``title`` included."""
        if isinstance(node, dict):
            if names:
                return {k: strip(v) for k, v in node.items()}
            return {k: strip(v, names=k in _NAME_MAPS) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    out = strip(schema)
    out.setdefault("properties", {})
    return out


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """Tool-call arguments as the model wrote them; malformed JSON is a ToolFailure."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ToolFailure(f"arguments are not valid JSON ({exc}): {raw[:200]!r}") from None
    if not isinstance(value, dict):
        raise ToolFailure(f"arguments must be a JSON object, got {type(value).__name__}")
    return value
