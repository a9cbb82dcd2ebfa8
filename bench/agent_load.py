"""The model service under agent load, on the tiny preset (random weights), through the stock
``openai`` client: budget-aware constrained output, cheap refusal, no head-of-line blocking.

    .venv/bin/python bench/agent_load.py [--calls 100] [--json 100] [--only structured|refusal|hol]

structured: forced calls at ``max_tokens`` 64 and 200 (temperature 1.5): how many finish as
``tool_calls`` and validate, how many are cut (``length`` with ``truncated``), how many are
anything else (a failure); single forced calls with 200 tokens of room; JSON-mode answers that
``json.loads`` (strict) reads.
refusal: a 1-token chat's latency while six 2 MiB bodies are refused.
hol: a 1-token chat's time to first token while a 27K-token prompt prefills.
hostile: each hostile grammar request (endless, left-recursive, a huge alternation, the most
tools allowed with parallel calls, 1,000 tools) with its answer, beside a 1-token chat's latency.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from httpx_sse import EventSource
from openai import OpenAI

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# the forced-call fixture of the test that checks the same outcomes at small counts
from tests.model.test_structured_budget import ASK, SCHEMAS, TOOLS  # noqa: E402


def serve(**model: Any) -> tuple[str, Any]:
    import uvicorn

    from services.model.app import create_app
    from shared.settings import load_settings

    settings = {
        "engine": "reference",
        "preset": "tiny",
        "max_num_seqs": 8,
        "max_pool_tokens": 65536,
        "num_threads": 1,
        **model,
    }
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(load_settings(model=settings)), host="127.0.0.1", port=port, log_level="error"
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def classify(choice: Any) -> str:
    """valid / cut / bad for one forced-call choice."""
    extra = choice.model_extra or {}
    if choice.finish_reason == "tool_calls":
        try:
            for call in choice.message.tool_calls:
                jsonschema.validate(
                    json.loads(call.function.arguments), SCHEMAS[call.function.name]
                )
        except (ValueError, jsonschema.ValidationError):
            return "bad"
        return "valid"
    if choice.finish_reason == "length" and extra.get("truncated"):
        return "cut"
    return "bad"


def structured(url: str, calls: int, json_n: int) -> None:
    client = OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600)
    for max_tokens in (64, 200):
        counts = {"valid": 0, "cut": 0, "bad": 0}
        for i in range(0, calls, 4):
            resp = client.chat.completions.create(
                model="k3-tiny", messages=ASK, tools=TOOLS, tool_choice="required",
                max_tokens=max_tokens, temperature=1.5, n=min(4, calls - i), seed=i,
            )  # fmt: skip
            for c in resp.choices:
                counts[classify(c)] += 1
        print(f"forced calls, max_tokens {max_tokens}, temperature 1.5: {counts}")
    single = {"valid": 0, "cut": 0, "bad": 0}
    for i in range(0, max(10, calls // 5), 5):
        resp = client.chat.completions.create(
            model="k3-tiny", messages=ASK, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, max_tokens=200, temperature=1.5, n=5, seed=1000 + i,
        )  # fmt: skip
        for c in resp.choices:
            single[classify(c)] += 1
    print(f"single forced call, max_tokens 200, temperature 1.5: {single}")
    parsed = cut = bad = 0
    for i in range(0, json_n, 4):
        resp = client.chat.completions.create(
            model="k3-tiny", messages=[{"role": "user", "content": "Reply in JSON."}],
            response_format={"type": "json_object"}, max_tokens=200, temperature=1.5,
            n=min(4, json_n - i), seed=i,
        )  # fmt: skip
        for c in resp.choices:
            try:
                json.loads(c.message.content or "", strict=True)
                parsed += 1
            except ValueError:
                cut += c.finish_reason == "length"
                bad += c.finish_reason != "length"
    print(f"JSON mode, max_tokens 200, temperature 1.5: {parsed} parse, {cut} cut, {bad} bad")


def one_token_chat(url: str) -> tuple[float, float]:
    """(time to first token, total) of a streamed 1-token chat."""
    started = time.monotonic()
    first = None
    with httpx.stream(
        "POST", url + "/v1/chat/completions", timeout=600,
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stream": True,
              "reasoning_effort": "none"},
    ) as r:  # fmt: skip
        for event in EventSource(r).iter_sse():
            if first is None and '"content"' in event.data and '""' not in event.data:
                first = time.monotonic() - started
    total = time.monotonic() - started
    return first or total, total


def refusal(url: str) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "word " * (400 * 1024)}]})

    def big() -> int:
        return httpx.post(
            url + "/v1/chat/completions", content=body, timeout=600,
            headers={"content-type": "application/json"},
        ).status_code  # fmt: skip

    with ThreadPoolExecutor(6) as pool:
        started = time.monotonic()
        futures = [pool.submit(big) for _ in range(6)]
        time.sleep(0.2)
        _, total = one_token_chat(url)
        statuses = [f.result() for f in futures]
        refused = time.monotonic() - started
    print(
        f"six 2 MiB bodies: {statuses}, all refused in {refused:.2f} s; 1-token chat {total:.2f} s"
    )


def head_of_line(url: str) -> None:
    long = {"messages": [{"role": "user", "content": "lorem ipsum dolor " * 2750}],
            "max_tokens": 1, "reasoning_effort": "none"}  # fmt: skip
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        fut = pool.submit(lambda: httpx.post(url + "/v1/chat/completions", json=long, timeout=900))
        time.sleep(3.0)
        ttft, total = one_token_chat(url)
        resp = fut.result()
        usage = resp.json().get("usage") or {"prompt_tokens": f"refused ({resp.status_code})"}
    print(
        f"while a {usage.get('prompt_tokens')}-token prompt prefills ({time.monotonic() - started:.1f} s): "
        f"1-token chat TTFT {ttft:.2f} s, total {total:.2f} s"
    )


def _custom(definition: str) -> dict[str, Any]:
    fmt = {"type": "grammar", "syntax": "lark", "definition": definition}
    return {"input": "x", "max_output_tokens": 32, "tool_choice": "required",
            "tools": [{"type": "custom", "name": "p", "format": fmt}]}  # fmt: skip


def _tools(n: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": schema}}
             for i in range(n)]  # fmt: skip
    return {"messages": ASK, "max_tokens": 32, "tool_choice": "required", "tools": tools}


HOSTILE = {
    "endless grammar": ("/v1/responses", _custom('start: "a" start')),
    "left-recursive grammar": ("/v1/responses", _custom('start: start "a"')),
    "huge alternation (2,000)": (
        "/v1/responses",
        _custom("start: " + " | ".join(f'"w{i}"' for i in range(2000))),
    ),
    "128 tools, parallel calls": ("/v1/chat/completions", _tools(128)),
    "1,000 tools, parallel calls": ("/v1/chat/completions", _tools(1000)),
}


def hostile(url: str) -> None:
    for name, (path, body) in HOSTILE.items():
        with ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            fut = pool.submit(lambda: httpx.post(url + path, json=body, timeout=600))  # noqa: B023
            time.sleep(0.3)
            _, chat = one_token_chat(url)
            resp = fut.result()
            took = time.monotonic() - started
        answer = resp.json().get("error", {}).get("message", "")[:70] or "completed"
        print(f"{name}: {resp.status_code} in {took:.2f} s ({answer}); 1-token chat {chat:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--json", type=int, default=100)
    ap.add_argument("--only", choices=["structured", "refusal", "hol", "hostile"])
    args = ap.parse_args()
    if args.only in (None, "structured"):
        url, server = serve(max_model_len=2048)
        structured(url, args.calls, args.json)
        server.should_exit = True
    if args.only in (None, "refusal", "hol"):
        url, server = serve(max_model_len=32768)
        if args.only in (None, "refusal"):
            refusal(url)
        if args.only in (None, "hol"):
            head_of_line(url)
        server.should_exit = True
    if args.only in (None, "hostile"):
        url, server = serve(max_model_len=32768)
        hostile(url)
        server.should_exit = True


if __name__ == "__main__":
    main()
