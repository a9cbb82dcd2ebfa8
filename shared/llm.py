"""The one way the platform calls a model: the official ``openai`` client, built from settings.

Judges, NPCs and the orchestrator's policy all go through here, so the endpoint, key, timeout
and retries are configured once (``K3STACK_LLM_URL``, ``K3STACK_LLM_API_KEY``,
``K3STACK_LLM_MODEL``, ``K3STACK_LLM_TIMEOUT_S``; by default the platform's own model service)::

    from shared.llm import openai_client, chat_text

    client = openai_client()                       # openai.OpenAI
    answer = client.chat.completions.create(model=default_model(), messages=[...])
    text = chat_text([{"role": "user", "content": "Rate this reply 1-5."}], max_tokens=8)

``base_url=`` points a call somewhere else (an NPC endpoint); ``http_client=`` takes an httpx
client (tests hand it FastAPI's ``TestClient`` to run the model service in-process).
"""

from __future__ import annotations

from typing import Any

import openai

from shared.chat import ChatMessage
from shared.settings import Settings, get_settings


def _options(
    settings: Settings | None, base_url: str | None, api_key: str | None, kw: dict[str, Any]
) -> dict[str, Any]:
    s = settings or get_settings()
    return {
        "base_url": base_url or s.llm_url or s.model.base_url + "/v1",
        # the openai client insists on a key; the local model service ignores it
        "api_key": api_key or s.llm_api_key or s.model.api_key or "k3stack-local",
        "timeout": s.llm_timeout_s,
        "max_retries": s.http_retries,
        **kw,
    }


def openai_client(
    settings: Settings | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    **kw: Any,
) -> openai.OpenAI:
    """A synchronous ``openai.OpenAI`` for the configured endpoint; ``kw`` overrides."""
    return openai.OpenAI(**_options(settings, base_url, api_key, kw))


def async_openai_client(
    settings: Settings | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    **kw: Any,
) -> openai.AsyncOpenAI:
    """The asynchronous twin (``openai.AsyncOpenAI``)."""
    return openai.AsyncOpenAI(**_options(settings, base_url, api_key, kw))


def default_model(settings: Settings | None = None) -> str:
    s = settings or get_settings()
    return s.llm_model or s.model.served_model_name


def chat_text(
    messages: list[ChatMessage] | list[dict[str, Any]],
    *,
    client: openai.OpenAI | None = None,
    settings: Settings | None = None,
    model: str | None = None,
    **options: Any,
) -> str:
    """One chat completion's text (judges, NPCs): ``options`` are request fields."""
    client = client or openai_client(settings)
    body = [
        m.model_dump(mode="json", exclude_none=True) if isinstance(m, ChatMessage) else m
        for m in messages
    ]
    answer = client.chat.completions.create(
        model=model or default_model(settings), messages=body, **options
    )
    return answer.choices[0].message.content or ""
