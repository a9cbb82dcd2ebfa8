"""What the real agent CLIs send, through the stock ``openai`` and ``anthropic`` clients: unknown
fields ignored and named, hosted tools dropped with a Warning header, namespaces flattened, and a
``custom`` tool's raw input constrained by its grammar and answered as a ``custom_tool_call``."""

from __future__ import annotations

import re

import anthropic
import httpx
from openai import OpenAI

from services.orchestrator.apply_patch import parse_patch

# A grammar of our own for a tiny patch language (the real Codex grammar is exercised, from the
# installed binary, in tests/orchestrator/test_installed_clients.py).
PATCH_LARK = r"""
start: "*** Begin Patch" LF hunk+ "*** End Patch" LF?
hunk: "*** Add File: " NAME LF ("+" /[a-z ]{0,12}/ LF)+
NAME: /[a-z]{1,8}\.txt/
%import common.LF
"""


def oai(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_unknown_fields_and_hosted_tools_are_named_not_refused(model_server):
    raw = oai(model_server.url).responses.with_raw_response.create(
        model="k3-tiny",
        input="hi",
        tools=[
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "web_search"},
        ],
        store=False,
        include=["reasoning.encrypted_content"],
        parallel_tool_calls=True,
        reasoning={"effort": "none"},
        max_output_tokens=4,
        extra_body={
            "client_metadata": {"thread": "t"},
            "background": False,
            "text": {"verbosity": "low"},
        },
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-k3stack-ignored-fields"] == "background"
    assert "tools[1] (web_search)" in raw.headers["warning"]
    assert raw.parse().status in ("completed", "incomplete")


def test_custom_grammar_tool_input_follows_its_grammar(model_server):
    c = oai(model_server.url)
    tools = [
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "Edit files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_LARK},
        },
        {
            "type": "custom",
            "name": "digits",
            "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]{3}"},
        },
    ]
    for seed in range(3):
        resp = c.responses.create(
            model="k3-tiny",
            input="Add a file.",
            tools=tools,
            tool_choice={"type": "custom", "name": "apply_patch"},
            reasoning={"effort": "none"},
            max_output_tokens=200,
            extra_body={"seed": seed},
        )
        call = resp.output[-1]
        assert call.type == "custom_tool_call" and call.name == "apply_patch", resp.output
        patch = parse_patch(call.input)  # the project's own parser takes every sample
        assert patch and all(re.fullmatch(r"[a-z]{1,8}\.txt", h.path) for h in patch)
    digits = c.responses.create(
        model="k3-tiny", input="x", tools=tools, tool_choice={"type": "custom", "name": "digits"},
        reasoning={"effort": "none"}, max_output_tokens=120,
    )  # fmt: skip
    assert re.fullmatch(r"[0-9]{3}", digits.output[-1].input)

    # The call goes back as input items, as Codex sends it, and the model takes it.
    follow = c.responses.create(
        model="k3-tiny",
        input=[
            {"role": "user", "content": "Add a file."},
            {
                "type": "custom_tool_call",
                "call_id": "c1",
                "name": "apply_patch",
                "input": call.input,
            },
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
        ],
        tools=tools,
        tool_choice="none",
        reasoning={"effort": "none"},
        max_output_tokens=4,
    )
    assert all(item.type not in ("custom_tool_call", "function_call") for item in follow.output)


def test_namespace_tools_are_flattened_and_called_back_by_their_own_name(model_server):
    body = {
        "model": "k3-tiny",
        "input": "Mail Bob.",
        "tools": [
            {
                "type": "namespace",
                "name": "mcp__gmail__",
                "tools": [
                    {
                        "type": "function",
                        "name": "send",
                        "parameters": {
                            "type": "object",
                            "properties": {"to": {"type": "string", "maxLength": 8}},
                            "required": ["to"],
                        },
                    }
                ],
            }
        ],
        "tool_choice": "required",
        "reasoning": {"effort": "none"},
        "max_output_tokens": 60,
    }
    r = httpx.post(model_server.url + "/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    call = r.json()["output"][-1]
    assert call["type"] == "function_call"
    assert (call["namespace"], call["name"]) == ("mcp__gmail__", "send")


def test_claude_code_fields_are_accepted(model_server):
    c = anthropic.Anthropic(base_url=model_server.url, api_key="k", max_retries=0, timeout=120)
    raw = c.beta.messages.with_raw_response.create(
        model="k3-tiny",
        max_tokens=8,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
        tools=[
            {
                "name": "Bash",
                "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 1},
        ],
        thinking={"type": "adaptive"},
        betas=["context-management-2025-06-27", "effort-2025-11-24"],
        extra_body={
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "low"},
            "speed": "fast",
        },
    )
    assert raw.http_response.status_code == 200
    assert raw.headers["x-k3stack-ignored-fields"] == "speed"
    assert "tools[1] (web_search_20250305)" in raw.headers["warning"]
    assert raw.parse().content[0].type == "thinking"  # output_config.effort kept thinking on

    # A system message inside messages (Claude Code sends one) stays a system message.
    r = httpx.post(
        model_server.url + "/v1/messages",
        json={
            "model": "k3-tiny", "max_tokens": 2,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": "Mind the clock."}]},
            ],
        },
        timeout=120,
    )  # fmt: skip
    assert r.status_code == 200, r.text


def test_cut_custom_call_is_incomplete_and_its_input_unwrapped(model_server):
    """Too few tokens for even the shortest patch: the answer says so (incomplete), and the
    input so far is the raw text, a prefix of the grammar's forced start, not its JSON wrapper."""
    tools = [
        {
            "type": "custom",
            "name": "apply_patch",
            "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_LARK},
        }
    ]
    resp = oai(model_server.url).responses.create(
        model="k3-tiny", input="Add a file.", tools=tools, reasoning={"effort": "none"},
        tool_choice={"type": "custom", "name": "apply_patch"}, max_output_tokens=32,
    )  # fmt: skip
    assert resp.status == "incomplete", resp
    assert resp.incomplete_details.reason == "max_output_tokens"
    start = "*** Begin Patch\n*** Add File: "
    calls = [item for item in resp.output if item.type == "custom_tool_call"]
    assert calls and calls[-1].input, resp.output
    assert start.startswith(calls[-1].input) or calls[-1].input.startswith(start), calls
