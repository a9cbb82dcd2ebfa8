"""shared.llm: the one way to call a model — the official openai client, configured from
settings, answering from the model service (here its replay engine, in-process)."""

from __future__ import annotations

import json

import openai
from fastapi.testclient import TestClient

from shared.llm import async_openai_client, chat_text, default_model, openai_client
from shared.settings import load_settings

ANSWER = {
    "id": "chatcmpl-judge",
    "object": "chat.completion",
    "created": 1,
    "model": "k3-tiny",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}
    ],
}
QUESTION = [{"role": "user", "content": "Rate this reply 1-5: 'Sure, done.'"}]


def test_client_is_built_from_settings():
    s = load_settings(model={"url": "http://model.svc:8000"}, llm_timeout_s=42.0, http_retries=1)
    client = openai_client(s)
    assert isinstance(client, openai.OpenAI)
    assert str(client.base_url) == "http://model.svc:8000/v1/"
    assert (client.timeout, client.max_retries) == (42.0, 1)
    assert default_model(s) == "k3-tiny"
    other = load_settings(llm_url="http://judge:9000/v1", llm_model="judge-7b", llm_api_key="k")
    aclient = async_openai_client(other)
    assert isinstance(aclient, openai.AsyncOpenAI) and aclient.api_key == "k"
    assert str(aclient.base_url) == "http://judge:9000/v1/" and default_model(other) == "judge-7b"


def test_chat_text_answers_through_the_model_service(tmp_path):
    from services.model.app import create_app

    replay = tmp_path / "judge.jsonl"
    request = {"messages": QUESTION, "temperature": 0}
    replay.write_text(json.dumps({"kind": "chat", "request": request, "response": ANSWER}) + "\n")
    s = load_settings(
        data_dir=tmp_path,
        model={"engine": "replay", "replay_file": str(replay), "served_model_name": "k3-tiny"},
    )
    with TestClient(create_app(s)) as http:
        client = openai_client(s, base_url="http://testserver/v1", http_client=http)
        assert chat_text(QUESTION, client=client, settings=s, temperature=0) == "4"
