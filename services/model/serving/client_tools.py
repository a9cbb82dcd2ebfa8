"""What real agent clients send that the chat engine does not take as is, made into chat terms.

Claude Code and Codex send fields and tool kinds beyond plain function tools. Here they become
chat function tools, and what cannot be served is named, never refused:

- Codex's ``custom`` tools (one raw-text input, optionally with a grammar ``format``, Lark or
  regex): a function with one string argument ``input`` carrying the grammar, so the model sees
  the grammar and :mod:`~services.model.serving.structured` constrains the input by it; the call
  goes back as a ``custom_tool_call``.
- ``namespace`` tools: their tools flattened under ``<namespace>__<name>`` (no separator when the
  namespace already ends with ``_``); calls go back with the ``namespace`` and the inner name.
- hosted tools the service cannot run (web search, file search, computer use, code execution,
  Anthropic's server tools): dropped, each named in a ``Warning`` header of the answer.
- top-level fields a route does not know: ignored (as the vendors' servers do) and named in an
  ``X-K3stack-Ignored-Fields`` header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.model.serving.protocol import OpenAIError
from services.model.serving.structured import GRAMMAR_KEY

INPUT_ARG = "input"


@dataclass(frozen=True)
class ToolKind:
    """How a flattened chat tool maps back to the client's own tool."""

    kind: str  # "function" or "custom"
    name: str  # the client's name (inside its namespace)
    namespace: str | None = None


@dataclass
class Offered:
    tools: list[dict[str, Any]] = field(default_factory=list)  # chat tool definitions
    kinds: dict[str, ToolKind] = field(default_factory=dict)  # chat name -> client tool
    warnings: list[str] = field(default_factory=list)

    def add(self, name: str, kind: ToolKind, function: dict[str, Any]) -> None:
        if name in self.kinds:
            raise OpenAIError(400, f"tools: {name!r} is declared twice", param="tools")
        self.kinds[name] = kind
        self.tools.append({"type": "function", "function": {"name": name, **function}})

    def dropped(self, where: str, kind: str) -> None:
        self.warnings.append(f"{where} ({kind}): a hosted tool this service cannot run; dropped")

    def client_name(self, chat_name: str) -> ToolKind:
        return self.kinds.get(chat_name) or ToolKind("function", chat_name)


def flat_name(namespace: str | None, name: str) -> str:
    if not namespace:
        return name
    return f"{namespace}{name}" if namespace.endswith("_") else f"{namespace}__{name}"


def custom_parameters(fmt: Any, where: str) -> dict[str, Any]:
    """A custom tool's one raw-text input, as a schema: plain text, or text of a grammar."""
    arg: dict[str, Any] = {"type": "string"}
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if syntax not in ("lark", "regex") or not isinstance(definition, str) or not definition:
            raise OpenAIError(
                400,
                f"{where}.format: a grammar needs syntax 'lark' or 'regex' and a definition",
                param="tools",
            )
        arg[GRAMMAR_KEY] = {"syntax": syntax, "definition": definition}
    elif fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise OpenAIError(400, f"{where}.format: expected type 'text' or 'grammar'", param="tools")
    return {"type": "object", "properties": {INPUT_ARG: arg}, "required": [INPUT_ARG]}


def responses_tools(tools: list[Any] | None) -> Offered:
    """Responses API tools -> chat tools (see the module docstring)."""
    out = Offered()

    def walk(items: list[Any], namespace: str | None, prefix: str) -> None:
        for i, tool in enumerate(items):
            where = f"{prefix}[{i}]"
            if not isinstance(tool, dict):
                raise OpenAIError(400, f"{where}: expected a tool object", param="tools")
            kind = tool.get("type", "function")
            name = tool.get("name")
            if kind in ("function", "custom") and (not isinstance(name, str) or not name):
                raise OpenAIError(400, f"{where}.name: required", param="tools")
            if kind == "function":
                function = {
                    k: tool[k] for k in ("description", "parameters", "strict") if k in tool
                }
                out.add(flat_name(namespace, name), ToolKind("function", name, namespace), function)
            elif kind == "custom":
                function = {
                    "description": tool.get("description"),
                    "parameters": custom_parameters(tool.get("format"), where),
                    "strict": True,  # the grammar (or the one string) is always enforced
                }
                out.add(flat_name(namespace, name), ToolKind("custom", name, namespace), function)
            elif kind == "namespace":
                inner = tool.get("tools")
                if not isinstance(name, str) or not name or not isinstance(inner, list):
                    raise OpenAIError(
                        400, f"{where}: a namespace needs a name and tools", param="tools"
                    )
                walk(inner, flat_name(namespace, name), f"{where}.tools")
            else:
                out.dropped(where, str(kind))

    walk(list(tools or []), None, "tools")
    return out


def messages_tools(tools: list[Any] | None) -> Offered:
    """Messages API tools -> chat tools: client tools (no type, or ``custom``) are functions;
    server tools (``web_search_*``, ``bash_*``, ``code_execution_*``, ...) are dropped."""
    out = Offered()
    for i, tool in enumerate(tools or []):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise OpenAIError(400, f"{where}: expected a tool object", param="tools")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            out.dropped(where, str(kind))
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 256:
            raise OpenAIError(400, f"{where}.name: required, 1-256 characters", param="tools")
        function = {
            "description": tool.get("description"),
            "parameters": tool.get("input_schema") or {"type": "object"},
        }
        out.add(name, ToolKind("function", name), function)
    return out


def answer_headers(ignored: list[str], warnings: list[str]) -> dict[str, str]:
    """The headers that name what a request carried but the service did not use."""
    headers: dict[str, str] = {}
    if ignored:
        headers["X-K3stack-Ignored-Fields"] = ", ".join(ignored)
    if warnings:
        text = "; ".join(warnings).replace('"', "'")
        headers["Warning"] = f'299 k3stack "{text}"'
    return headers
