"""Malformed requests to every API get a 400 naming the problem, in the right envelope (OpenAI's,
or Anthropic's on /v1/messages): never a 500."""

from __future__ import annotations

import json

import httpx
import pytest

MSG = [{"role": "user", "content": "hi"}]
CASES = [
    ("/v1/messages", {"max_tokens": 2, "messages": [{"role": "user", "content": ["x"]}]}, "content blocks"),
    ("/v1/messages", {"max_tokens": 2, "messages": [{"role": "assistant", "content": [1]}]}, "content blocks"),
    ("/v1/messages", {"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]}, "matches no earlier"),
    ("/v1/messages", {"max_tokens": 2, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]}, "messages.0.tool_calls.0.id"),
    ("/v1/messages", {"max_tokens": 2, "messages": MSG, "tool_choice": {"type": "tool"}, "tools": [{"name": "f"}]}, "tool_choice.name"),
    ("/v1/messages", {"max_tokens": 2, "messages": MSG, "tool_choice": {"type": "tool", "name": "g"}, "tools": [{"name": "f"}]}, "'g' is not declared"),
    ("/v1/messages", {"max_tokens": 2, "messages": MSG, "system": [{"type": "image"}]}, "system[0]"),
    ("/v1/messages", {"max_tokens": 2, "messages": [{"role": "user", "content": None}]}, "messages[0]"),
    ("/v1/messages", {"messages": MSG}, "max_tokens"),
    ("/v1/messages/count_tokens", {"messages": [{"role": "user", "content": "\ud800"}]}, "lone surrogate"),
    ("/v1/responses", {"input": [{"type": "function_call", "call_id": "c"}]}, "function.name"),
    ("/v1/responses", {"input": [{"type": "function_call_output", "call_id": "zz", "output": "x"}]}, "matches no earlier"),
    ("/v1/responses", {"input": [{"role": "user", "content": [1, 2]}]}, "input[0].content[0]"),
    ("/v1/responses", {"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ("/v1/responses", {"input": "x", "tool_choice": {"type": "function", "name": "nope"}, "tools": [{"type": "function", "name": "f"}]}, "'nope' is not declared"),
    ("/v1/responses", {"input": "x", "tools": [{"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "lark", "definition": "start: (("}}]}, "Lark grammar"),
    ("/v1/responses", {"input": "x", "tools": [{"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "peg", "definition": "x"}}]}, "syntax 'lark' or 'regex'"),
    ("/v1/responses", {"input": "x", "tools": [{"type": "namespace", "name": "n"}]}, "namespace needs"),
    ("/v1/messages", {"max_tokens": 2, "messages": MSG, "tools": [{"description": "no name"}]}, "tools[0].name"),
    ("/v1/responses", {"input": "x", "text": {"format": {"type": "json_schema", "schema": {"$ref": "#/x"}}}}, "cannot enforce"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"abc": 1}}, "not a token id"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"\u00b2": 1}}, "not a token id"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"--5": 1}}, "not a token id"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"\u0663": 1}}, "not a token id"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"+5": 1}}, "not a token id"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"9" * 5000: 1}}, "not a token id"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {str(i): 1 for i in range(1025)}}, "at most 1024"),
    ("/v1/responses", {"input": "x", "tool_choice": "required", "tools": [{"type": "custom", "name": "endless", "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "a" start'}}]}, "'endless': the tool's Lark grammar derives no finite text"),
    ("/v1/responses", {"input": "x", "tool_choice": "required", "tools": [{"type": "custom", "name": "left", "format": {"type": "grammar", "syntax": "lark", "definition": 'start: start "a"'}}]}, "'left': the tool's Lark grammar derives no finite text"),
    ("/v1/chat/completions", {"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"allOf": [{"type": "string"}, {"type": "integer"}]}}}}, "response_format.json_schema.schema: no JSON value satisfies"),
    ("/v1/chat/completions", {"messages": MSG, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}}}]}, "'t': no finite JSON value"),
    ("/v1/chat/completions", {"messages": MSG, "tool_choice": "auto", "tools": [{"type": "function", "function": {"name": "u", "strict": True, "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["n"]}}}]}, "'u': no JSON value"),
    ("/v1/completions", {"prompt": [99999999], "max_tokens": 1}, "prompt token ids"),
    ("/v1/detokenize", {"tokens": [-1]}, "not in [0,"),
    ("/v1/tokenize", {"messages": MSG, "tool_choice": "required"}, "tool_choice needs tools"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "match"), CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_malformed_request_is_a_400(model_server, path, body, match):
    r = httpx.post(
        model_server.url + path,
        content=json.dumps(body),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    data = r.json()
    if path.startswith("/v1/messages"):
        assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    else:
        assert data["error"]["type"] == "invalid_request_error"
    assert match in data["error"]["message"], data
