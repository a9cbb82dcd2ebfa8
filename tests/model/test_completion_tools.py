"""``tools`` + ``tool_choice`` on ``/v1/completions`` (a token-in-token-out agent turn): a token
prompt that ends with the chat template's generation prefix is decoded under the same tool
grammar as a chat completion, with nothing added to the prompt; its output parses (through chat
completions' own parser, on the same text) into schema-valid calls. A prompt that did not open an
assistant turn is a 400 naming ``tools``."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from services.model.serving.parser import parse_assistant, split_markers
from tests.model.test_structured import ASK, SCHEMAS, TOOLS


@pytest.mark.parametrize("effort", ["none", "low"])
def test_token_prompt_under_required_tools_is_a_valid_call(model_server, effort) -> None:
    with httpx.Client(base_url=model_server.url + "/v1", timeout=120) as http:
        prompt = http.post("/tokenize", json={"messages": ASK, "tools": TOOLS,
                                              "reasoning_effort": effort}).json()  # fmt: skip
        for seed in (1, 2):
            body = {"prompt": prompt["tokens"], "tools": TOOLS, "tool_choice": "required",
                    "max_tokens": 96, "temperature": 1.0, "seed": seed,
                    "return_token_ids": True}  # fmt: skip
            resp = http.post("/completions", json=body)
            assert resp.status_code == 200, resp.text
            choice = resp.json()["choices"][0]
            assert choice["finish_reason"] == "stop"
            assert resp.json()["usage"]["prompt_tokens"] == len(prompt["tokens"])
            mode = "response" if effort == "none" else "think"
            parsed = parse_assistant(split_markers(choice["text"]), mode)
            assert parsed.tool_calls and not parsed.errors, choice["text"]
            for call in parsed.tool_calls:
                jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_tools_need_a_prompt_that_opened_an_assistant_turn(model_server) -> None:
    with httpx.Client(base_url=model_server.url + "/v1", timeout=120) as http:
        closed = http.post("/tokenize", json={"messages": ASK, "tools": TOOLS,
                                              "add_generation_prompt": False}).json()  # fmt: skip
        body = {"prompt": closed["tokens"], "tools": TOOLS, "tool_choice": "required",
                "max_tokens": 8}  # fmt: skip
        resp = http.post("/completions", json=body)
        assert resp.status_code == 400 and "tools" in resp.text, resp.text
        no_tools = http.post("/completions", json={"prompt": [1, 2], "tool_choice": "required"})
        assert no_tools.status_code == 400 and "tool_choice" in no_tools.text, no_tools.text
