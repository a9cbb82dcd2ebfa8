"""The prefix cache through the service: OpenAI's ``usage.prompt_tokens_details.cached_tokens``
the cache and admission-class readings on /metrics, on a real server (tiny preset, small pages)."""

from __future__ import annotations

import httpx
from openai import OpenAI

from tests.model.conftest import model_settings, running


def test_a_shared_system_prompt_is_reported_cached_and_counted_on_metrics():
    from services.model.app import create_app

    settings = model_settings(
        page_tokens=64, hash_block_tokens=32, max_num_batched_tokens=64,
        admission_classes="4096:48",
    )  # fmt: skip
    system = "You are a careful agent. " * 30
    with running(create_app(settings)) as server:
        c = OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)

        def ask(question: str):  # type: ignore[no-untyped-def]
            return c.chat.completions.create(
                model="k3-tiny",
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": question},
                ],
                max_tokens=2,
                temperature=0,
            )

        first = ask("What is two plus two?")
        second = ask("Name a colour.")
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert 0 < cached < second.usage.prompt_tokens and cached % 16 == 0
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
    readings = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith(("k3stack_model_engine_prefix_cache", "k3stack_model_engine_class"))
    }
    assert readings["k3stack_model_engine_prefix_cache_hit_tokens"] == cached
    assert readings["k3stack_model_engine_prefix_cache_checkpoints"] >= 1
    assert 0 < readings["k3stack_model_engine_prefix_cache_hit_rate"] < 1
    assert readings["k3stack_model_engine_class0_admitted"] == 2  # both prompts are short
    assert readings["k3stack_model_engine_class1_admitted"] == 0
