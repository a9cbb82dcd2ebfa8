"""The ``sglang`` engine: attach mode against a stand-in SGLang (an OpenAI-compatible server on
loopback) through the service and the official client, the pinned version's recipe flags, and
the warning when KDA falls back from fla's CUDA kernels to torch.

SGLang itself is not installed here (the ``sglang`` extra pulls CUDA builds); the stand-in
answers what SGLang's OpenAI routes answer, and records what it was sent.
"""

from __future__ import annotations

import json
import logging
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai import OpenAI

from services.model.app import create_app
from tests.model.conftest import model_settings

ROOT = Path(__file__).resolve().parents[2]


def stand_in_sglang(seen: list[dict]) -> FastAPI:
    """``/v1/chat/completions`` (plain and streamed) answering "pong", recording each call."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):  # type: ignore[no-untyped-def]
        body = await request.json()
        seen.append({"auth": request.headers.get("authorization"), "body": body})
        if request.headers.get("authorization") != "Bearer sk-upstream":
            return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
        base = {"id": "c1", "created": 1, "model": body["model"]}
        if not body.get("stream"):
            return {
                **base,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "pong"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }

        def events():  # type: ignore[no-untyped-def]
            for delta, finish in (({"role": "assistant", "content": "po"}, None),
                                  ({"content": "ng"}, "stop")):  # fmt: skip
                chunk = {
                    **base,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def test_attach_mode_sends_the_upstream_model_and_key_through_the_real_client(serve_app):
    seen: list[dict] = []
    upstream = serve_app(stand_in_sglang(seen))
    settings = model_settings(
        engine="sglang", upstream_url=upstream.url, upstream_model="moonshotai/Kimi-K3",
        upstream_api_key="sk-upstream",
    )  # fmt: skip
    service = serve_app(create_app(settings))
    client = OpenAI(base_url=service.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "ping"}]
    answer = client.chat.completions.create(model="k3-tiny", messages=messages, max_tokens=4)
    assert answer.choices[0].message.content == "pong"
    assert answer.model == "k3-tiny"  # this service's name, not the upstream's
    stream = client.chat.completions.create(
        model="k3-tiny", messages=messages, max_tokens=4, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "pong"
    assert len(seen) == 2
    for call in seen:
        assert call["auth"] == "Bearer sk-upstream"
        assert call["body"]["model"] == "moonshotai/Kimi-K3"
        assert call["body"]["messages"] == messages and call["body"]["max_tokens"] == 4
    assert seen[1]["body"]["stream"] is True


def test_launch_mode_command_uses_the_pinned_versions_flags(tmp_path, monkeypatch):
    from services.model.serving.backends import sglang

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["sglang"] == [f"sglang=={sglang.SGLANG_VERSION}"]
    assert "sglang" not in " ".join(extras["all"])  # a CUDA install, never make setup's
    cmd = sglang.sglang_command(
        tmp_path, served_model_name="kimi", port=30001, api_key="sk", extra_args="--tp-size 8"
    )
    flags = cmd[cmd.index("--trust-remote-code") :]
    assert flags[-2:] == ["--tp-size", "8"]  # the operator's flags come last and win
    assert cmd[cmd.index("--api-key") + 1] == "sk"
    pairs = dict(zip(flags[1:-2:2], flags[2:-2:2], strict=True))
    assert pairs == {
        "--tool-call-parser": "kimi_k2",
        "--reasoning-parser": "kimi_k2",
        "--mamba-ssm-dtype": "bfloat16",
        "--mamba-radix-cache-strategy": "extra_buffer",  # not the pre-rename scheduler flag
    }


def test_launch_mode_warns_when_another_sglang_version_is_installed(monkeypatch, caplog):
    from services.model.serving.backends import sglang

    monkeypatch.setattr(sglang.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(sglang.importlib.metadata, "version", lambda name: "0.5.4")
    with caplog.at_level(logging.WARNING, logger="k3stack.model.sglang"):
        assert sglang.installed_sglang() == "0.5.4"
    assert "SGLang 0.5.4 is installed" in caplog.text and sglang.SGLANG_VERSION in caplog.text


def test_kda_on_cuda_warns_when_fla_falls_back_to_torch(monkeypatch, caplog):
    from services.model.arch import kda

    monkeypatch.setattr(kda, "_FALLBACKS_LOGGED", set())
    monkeypatch.setitem(sys.modules, "fla.ops.kda", None)  # the import fails
    cuda = torch.device("cuda")
    with caplog.at_level(logging.WARNING, logger="k3stack.model.kda"):
        assert kda.kda_kernels(cuda, "chunk") is kda.chunk_kda
        assert kda.kda_kernels(cuda, "recurrent") is kda.recurrent_kda
    warnings = [r for r in caplog.records if "falls back to the torch kernels" in r.message]
    assert len(warnings) == 1  # once per reason, not once per forward
    assert "fla.ops.kda" in warnings[0].message and "on cuda" in warnings[0].message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="k3stack.model.kda"):
        assert kda.kda_kernels(torch.device("cpu"), "chunk") is kda.chunk_kda
    assert not caplog.records  # the torch code is the CPU path, not a fallback


@pytest.mark.parametrize("missing", ["UPSTREAM_URL"])
def test_launch_mode_without_sglang_says_what_to_install(missing):
    from services.model.serving.backends.sglang import SGLANG_VERSION, SGLangUnavailable

    with pytest.raises(SGLangUnavailable, match=missing) as info:
        create_app(model_settings(engine="sglang"))
    assert SGLANG_VERSION in str(info.value) and "k3stack[sglang]" in str(info.value)
