"""The XTML chat template of Kimi K3 (report appendix F): OpenAI messages -> prompt segments.

Syntax. XTML is XML with the angle brackets replaced by reserved tokens: an element is
``[open]tag attrs[sep] body [close]tag[sep]``. Attributes are ``name="string"`` (a JSON string
literal, so quotes and backslashes are escaped) or ``name:=json`` (a compact JSON value, e.g.
``index:=0``, ``type:="tool-declare"``). A message is an element whose closing is the single
``[end_of_msg]`` token, which is also the generation stop token::

    [open]message role="user"[sep]What is the weather in Paris?[end_of_msg]

Layout (figure 16a): global option messages first — tool declarations (``type:="tool-declare"``),
then the thinking effort (``type:="thinking-effort"``) — because they rarely change and changing
them invalidates the KV cache anyway; then the input messages (system / user / assistant / tool);
then one-shot options (``type:="tool-choice"``, ``type:="response-format"``), after the history,
so that per-request changes leave the cached history intact. Options are short natural-language
instructions, not special syntax (the report's low alignment tax).

Assistant messages (figure 16b) are channels: ``think`` (reasoning), ``response`` (visible
answer), ``tools`` (calls). Generation starts with ``[open]think[sep]`` (thinking mode) or
``[open]response[sep]`` (instruct mode). Thinking is preserved: in thinking mode every historical
assistant message keeps its ``think`` channel, empty or not; in instruct mode history carries only
``response`` and ``tools``.

Tool calls (figure 16c): each call is ``[open]call tool="name" index:=i[sep] args [close]call[sep]``
with ``i`` numbering the parallel calls of one message; the tool result repeats
``tool="name" index:=i``. Arguments are typed: a string argument is raw text
(``[open]arg name="code"[sep]print(1)[close]arg[sep]``), any other JSON value is compact JSON and
says so (``[open]arg name="days" type="json"[sep]3[close]arg[sep]``), so code is text rather than
an escaped JSON string. Arguments that are not a JSON object use the fallback
``[open]json[sep]...[close]json[sep]`` block, which only ever appears in prompts.

Rendering yields segments ``(text, is_special)``; only structural markers are special, and
content is encoded with specials disabled, so user text spelling ``[open]`` cannot inject
structure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from services.model.tokenizer.base import CLOSE, END_OF_MSG, OPEN, SEP, Tokenizer

Segment = tuple[str, bool]
Mode = Literal["think", "response"]
REASONING_EFFORTS = ("low", "medium", "high", "max")

EFFORT_TEXT = {
    "low": "Reasoning effort: low. Think briefly and answer quickly.",
    "medium": "Reasoning effort: medium. Think as much as the task needs.",
    "high": "Reasoning effort: high. Think carefully and thoroughly before answering.",
    "max": "Reasoning effort: max. Use as much thinking as helps: explore alternatives and "
    "verify the answer before giving it.",
}


class TemplateError(ValueError):
    """The request cannot be rendered (the API answers 400 with this message)."""


def attr_str(name: str, value: str) -> str:
    return f" {name}={json.dumps(value, ensure_ascii=False)}"


def attr_json(name: str, value: Any) -> str:
    return f" {name}:={json.dumps(value, ensure_ascii=False, separators=(',', ':'))}"


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Rendered:
    """A rendered prompt: segments plus the mode its generation prefix opened."""

    segments: list[Segment] = field(default_factory=list)
    mode: Mode = "think"

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.segments)

    def token_ids(self, tokenizer: Tokenizer) -> list[int]:
        ids: list[int] = []
        for text, special in self.segments:
            if special:
                ids.append(tokenizer.special_id(text))
            else:
                ids.extend(tokenizer.encode(text))
        return ids


class _Writer:
    """Accumulates segments, merging adjacent text."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []

    def special(self, tok: str) -> None:
        self.segments.append((tok, True))

    def text(self, text: str) -> None:
        if not text:
            return
        if self.segments and not self.segments[-1][1]:
            self.segments[-1] = (self.segments[-1][0] + text, False)
        else:
            self.segments.append((text, False))

    def open(self, tag: str, attrs: str = "") -> None:
        self.special(OPEN)
        self.text(tag + attrs)
        self.special(SEP)

    def close(self, tag: str) -> None:
        self.special(CLOSE)
        self.text(tag)
        self.special(SEP)

    def element(self, tag: str, body: str, attrs: str = "") -> None:
        self.open(tag, attrs)
        self.text(body)
        self.close(tag)

    def message(self, attrs: str, body: str | None = None) -> None:
        """Open a message; with ``body``, write it and end the message."""
        self.open("message", attrs)
        if body is not None:
            self.text(body)
            self.special(END_OF_MSG)


def content_text(content: Any, where: str) -> str:
    """The text of an OpenAI message ``content`` (a string or a list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
                continue
            if not isinstance(part, Mapping):
                raise TemplateError(f"{where}.content[{i}]: expected a content part object")
            kind = part.get("type", "text")
            if kind != "text":
                raise TemplateError(
                    f"{where}.content[{i}]: content part type {kind!r} is not supported "
                    "(only 'text')"
                )
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise TemplateError(f"{where}.content: expected a string or a list of parts")


def tool_spec(tool: Mapping[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """(name, declaration body) of an OpenAI ``tools`` entry."""
    if tool.get("type", "function") != "function":
        raise TemplateError(f"{where}.type: only 'function' tools are supported")
    fn = tool.get("function")
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise TemplateError(f"{where}.function.name: required")
    body: dict[str, Any] = {}
    if fn.get("description"):
        body["description"] = fn["description"]
    body["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
    if fn.get("strict") is not None:
        body["strict"] = fn["strict"]
    return fn["name"], body


def write_tool_call_args(w: _Writer, arguments: Any) -> None:
    """Typed argument blocks for a call, or the JSON fallback block when they do not decompose."""
    parsed: Any
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            w.element("json", arguments)
            return
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        w.element("json", arguments if isinstance(arguments, str) else compact_json(arguments))
        return
    for name, value in parsed.items():
        if isinstance(value, str):
            w.element("arg", value, attr_str("name", str(name)))
        else:
            w.element("arg", compact_json(value), attr_str("name", str(name)) + ' type="json"')


def write_assistant_body(
    w: _Writer,
    *,
    reasoning: str | None,
    content: str,
    tool_calls: Sequence[Mapping[str, Any]],
    mode: Mode,
    where: str = "assistant",
) -> None:
    """The channels of an assistant message, ending with ``[end_of_msg]``."""
    if mode == "think":
        w.element("think", reasoning or "")
    # Instruct generation always opens with the response channel, so history keeps it too.
    if content or not tool_calls or mode == "response":
        w.element("response", content)
    if tool_calls:
        w.open("tools")
        for i, call in enumerate(tool_calls):
            fn = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
                raise TemplateError(f"{where}.tool_calls[{i}].function.name: required")
            w.open("call", attr_str("tool", fn["name"]) + attr_json("index", i))
            write_tool_call_args(w, fn.get("arguments", "{}"))
            w.close("call")
        w.close("tools")
    w.special(END_OF_MSG)


def generation_prefix(mode: Mode) -> list[Segment]:
    w = _Writer()
    w.message(attr_str("role", "assistant"))
    w.open(mode)
    return w.segments


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    response_format: Mapping[str, Any] | None = None,
    reasoning_effort: str | None = None,
    thinking: bool = True,
    add_generation_prompt: bool = True,
    parallel_tool_calls: bool | None = None,
) -> Rendered:
    """Render an OpenAI-style chat request; raises :class:`TemplateError` on bad input.

    ``thinking`` picks the mode (think channel first, preserved in history) or instruct mode;
    ``reasoning_effort`` adds the thinking-effort option (thinking mode only);
    ``parallel_tool_calls=False`` adds "at most one tool" to the one-shot tool-choice option.
    """
    if not messages:
        raise TemplateError("messages: at least one message is required")
    if reasoning_effort is not None and reasoning_effort not in REASONING_EFFORTS:
        raise TemplateError(
            f"reasoning_effort: {reasoning_effort!r} is not one of {REASONING_EFFORTS}"
        )
    mode: Mode = "think" if thinking else "response"
    w = _Writer()

    # Global options: tool declarations, then thinking effort.
    declared: set[str] = set()
    if tools:
        w.message(attr_str("role", "option") + attr_json("type", "tool-declare"))
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise TemplateError(f"tools[{i}]: expected an object")
            name, body = tool_spec(tool, f"tools[{i}]")
            if name in declared:
                raise TemplateError(f"tools[{i}].function.name: duplicate tool {name!r}")
            declared.add(name)
            w.element("tool", compact_json(body), attr_str("name", name))
        w.special(END_OF_MSG)
    if reasoning_effort is not None and mode == "think":
        w.message(
            attr_str("role", "option") + attr_json("type", "thinking-effort"),
            EFFORT_TEXT[reasoning_effort],
        )

    # Input messages.
    calls_by_id: dict[str, tuple[str, int]] = {}
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, Mapping):
            raise TemplateError(f"{where}: expected an object")
        role = msg.get("role")
        if role in ("system", "developer", "user"):
            text = content_text(msg.get("content"), where)
            attrs = attr_str("role", "system" if role == "developer" else role)
            if msg.get("name"):
                attrs += attr_str("name", str(msg["name"]))
            w.message(attrs, text)
        elif role == "assistant":
            tool_calls = msg.get("tool_calls") or []
            if not isinstance(tool_calls, Sequence):
                raise TemplateError(f"{where}.tool_calls: expected a list")
            for j, call in enumerate(tool_calls):
                fn = call.get("function") if isinstance(call, Mapping) else None
                name = fn.get("name") if isinstance(fn, Mapping) else None
                if isinstance(call, Mapping) and call.get("id") and isinstance(name, str):
                    calls_by_id[str(call["id"])] = (name, j)
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            w.message(attr_str("role", "assistant"))
            write_assistant_body(
                w,
                reasoning=reasoning if isinstance(reasoning, str) else None,
                content=content_text(msg.get("content"), where),
                tool_calls=tool_calls,
                mode=mode,
                where=where,
            )
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if not call_id:
                raise TemplateError(f"{where}.tool_call_id: required for role 'tool'")
            if str(call_id) not in calls_by_id:
                raise TemplateError(
                    f"{where}.tool_call_id: {call_id!r} matches no earlier assistant tool call"
                )
            name, index = calls_by_id[str(call_id)]
            w.message(
                attr_str("role", "tool") + attr_str("tool", name) + attr_json("index", index),
                content_text(msg.get("content"), where),
            )
        else:
            raise TemplateError(
                f"{where}.role: {role!r} is not one of system, developer, user, assistant, tool"
            )

    # One-shot options, after the history so per-request changes keep its cache.
    choice_text = tool_choice_text(tool_choice, declared)
    if parallel_tool_calls is False and declared and tool_choice != "none":
        choice_text = ((choice_text or "") + " Call at most one tool at a time.").strip()
    if choice_text:
        w.message(attr_str("role", "option") + attr_json("type", "tool-choice"), choice_text)
    format_text = response_format_text(response_format)
    if format_text:
        w.message(attr_str("role", "option") + attr_json("type", "response-format"), format_text)

    if add_generation_prompt:
        for seg in generation_prefix(mode):
            if seg[1]:
                w.special(seg[0])
            else:
                w.text(seg[0])
    return Rendered(w.segments, mode)


def tool_choice_text(choice: str | Mapping[str, Any] | None, declared: set[str]) -> str | None:
    if choice is None or choice == "auto":
        return None
    if choice == "none":
        return "Do not call any tool in this reply; answer directly."
    if choice == "required":
        if not declared:
            raise TemplateError("tool_choice: 'required' needs at least one tool in tools")
        return "Call at least one of the declared tools in this reply."
    if isinstance(choice, Mapping):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not name:
            raise TemplateError("tool_choice.function.name: required")
        if name not in declared:
            raise TemplateError(f"tool_choice: tool {name!r} is not declared in tools")
        return f"Call the tool {name} in this reply."
    raise TemplateError(
        f"tool_choice: {choice!r} is not 'none', 'auto', 'required' or a function object"
    )


def response_format_text(fmt: Mapping[str, Any] | None) -> str | None:
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return "Write the response as a single valid JSON object and nothing else."
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
            raise TemplateError("response_format.json_schema: expected an object with 'schema'")
        schema = spec.get("schema", {})
        name = spec.get("name")
        named = f" ({name})" if name else ""
        return (
            f"Write the response as a single JSON value{named} that validates against this "
            f"JSON schema, and nothing else: {compact_json(schema)}"
        )
    raise TemplateError(
        f"response_format.type: {kind!r} is not 'text', 'json_object' or 'json_schema'"
    )


def render_assistant(
    *,
    reasoning: str | None = None,
    content: str = "",
    tool_calls: Sequence[Mapping[str, Any]] = (),
    mode: Mode = "think",
) -> list[Segment]:
    """What the model would generate after the ``mode`` prefix for this assistant turn.

    The prefix already opened the first channel, so the result starts inside it. Used by tests
    (render -> parse round trips) and by anything that needs target tokens for a turn.
    """
    w = _Writer()
    write_assistant_body(w, reasoning=reasoning, content=content, tool_calls=tool_calls, mode=mode)
    segs = w.segments
    # Drop the leading "[open]<mode>[sep]": the generation prefix supplies it.
    assert segs[0] == (OPEN, True) and segs[1] == (mode, False) and segs[2] == (SEP, True)
    return segs[3:]
