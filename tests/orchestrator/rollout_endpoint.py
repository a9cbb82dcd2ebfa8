"""A scripted, deterministic policy endpoint speaking the OpenAI completions protocol with token
ids (a named stand-in for the model service in rollout tests: the real path is the model
service's ``/v1/completions`` + ``/v1/tokenize``, same fields).

Tokens: bytes 0-255 plus role markers. A sample's instruction says ``turns=N``; each turn before
the last adds a file (apply_patch: its observation is deterministic) holding a digest of the whole prompt ids,
so any drift in what the model was sent changes everything after it."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

SPECIAL = {"system": 256, "user": 257, "assistant": 258, "tool": 259}
END = 260


def render(messages: list[dict[str, Any]], generation: bool) -> list[int]:
    ids: list[int] = []
    for m in messages:
        text = m.get("content") or ""
        if m.get("role") == "tool":
            text = f"{m.get('tool_call_id')}:{text}"
        ids += [SPECIAL[m["role"]], *text.encode()] + [END]
    return ids + ([SPECIAL["assistant"]] if generation else [])


def endpoint(
    gate: Callable[[int, str], None] | None = None, long_text: int = 0, logprobs: bool = True
) -> FastAPI:
    """``logprobs=False``: an endpoint that returns none (as some servers do)."""
    app = FastAPI()
    app.state.prompts = []

    @app.post("/v1/tokenize")
    def tokenize(body: dict[str, Any]) -> dict[str, Any]:
        ids = render(body["messages"], body.get("add_generation_prompt", True))
        if body.get("tools"):
            names = ",".join(t["function"]["name"] for t in body["tools"])
            ids = [*f"tools:{names}".encode(), *ids]
        return {"tokens": ids, "count": len(ids)}

    @app.post("/v1/completions")
    def complete(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        assert isinstance(prompt, list) and all(isinstance(i, int) for i in prompt)
        app.state.prompts.append(list(prompt))
        turn = prompt.count(SPECIAL["assistant"]) - 1
        user = bytes(i for i in prompt[prompt.index(SPECIAL["user"]) + 1 :] if i < 256)
        found = re.search(rb"turns=(\d+)", user)
        turns = int(found.group(1)) if found else 1
        if gate is not None:
            gate(turn, user.decode(errors="replace"))
        digest = zlib.crc32(bytes(str(prompt), "ascii")) % 100000
        if turn < turns - 1:
            patch = f"*** Begin Patch\n*** Add File: notes/t{turn}.txt\n+{digest}\n*** End Patch"
            call = {"name": "apply_patch", "arguments": {"input": patch}}
            text = "<tool_call>" + json.dumps(call)
            text += "</tool_call>"
        else:
            text = f"Done {digest}." + ("x" * long_text if b"at length" in user else "")
        ids = [*text.encode()]
        finish = "stop"
        if len(ids) >= body.get("max_tokens", 10**9):
            ids, finish = ids[: body["max_tokens"]], "length"
        else:
            ids.append(END)
        lps = {"token_logprobs": [-0.01 * (i % 7) for i in ids]} if logprobs else None
        return {
            "id": "cmpl-1", "object": "text_completion", "model": "scripted",
            "choices": [{"index": 0, "text": bytes(i for i in ids if i < 256).decode(),
                         "finish_reason": finish, "token_ids": ids, "logprobs": lps}],
        }  # fmt: skip

    return app
