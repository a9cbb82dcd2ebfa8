"""No single request's grammar stalls the others: endless and left-recursive grammars, a huge
alternation and the largest tool set allowed (with parallel calls) each answer 4xx or complete
while 1-token chats keep answering and the engine keeps stepping; an over-cap tool set is a 400;
grammar compiles are cached, bounded in time and dropped when nobody waits for them."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from services.model.serving.grammar_compile import CompileTimeout, GrammarWorker
from services.model.serving.protocol import MAX_TOOLS
from services.model.serving.tokenize_pool import Cancelled
from tests.model.conftest import model_settings, running

MSG = [{"role": "user", "content": "hi"}]


def _custom(definition: str) -> dict:
    tool = {"type": "custom", "name": "p", "format": {"type": "grammar", "syntax": "lark", "definition": definition}}  # fmt: skip
    return {"input": "x", "max_output_tokens": 16, "tool_choice": "required", "tools": [tool]}


def _tools(n: int) -> dict:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": schema}} for i in range(n)]  # fmt: skip
    return {"messages": MSG, "max_tokens": 4, "tool_choice": "required", "tools": tools}


HOSTILE = {
    "endless": ("/v1/responses", _custom('start: "a" start')),
    "left-recursive": ("/v1/responses", _custom('start: start "a"')),
    "left-recursive with a base": ("/v1/responses", _custom('start: start "a" | "b"')),
    "huge alternation": ("/v1/responses", _custom("start: " + " | ".join(f'"w{i}"' for i in range(300)))),
    "most tools, parallel calls": ("/v1/chat/completions", _tools(MAX_TOOLS)),
}  # fmt: skip


@pytest.fixture(scope="module")
def roomy_server():
    """The tiny model with room for the largest tool set in its context."""
    from services.model.app import create_app

    settings = model_settings(max_model_len=16384, max_pool_tokens=32768)
    with running(create_app(settings)) as server:
        yield server


def test_hostile_grammars_leave_chats_answering_and_the_engine_stepping(roomy_server):
    client = httpx.Client(base_url=roomy_server.url, timeout=120)
    steps_before = client.get("/health").json()["checks"]["engine"]["steps"]
    done = threading.Event()
    chats: list[int] = []

    def chat_while_busy() -> None:
        while not done.is_set():
            chats.append(client.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 1}).status_code)  # fmt: skip

    with ThreadPoolExecutor(len(HOSTILE) + 1) as pool:
        chatter = pool.submit(chat_while_busy)
        answers = {name: pool.submit(client.post, path, json=body) for name, (path, body) in HOSTILE.items()}  # fmt: skip
        codes = {name: f.result(timeout=200).status_code for name, f in answers.items()}
        done.set()
        chatter.result(timeout=120)
    assert all(code == 200 or 400 <= code < 500 for code in codes.values()), codes
    assert codes["endless"] == codes["left-recursive"] == 400, codes
    assert codes["most tools, parallel calls"] == 200, codes
    assert chats and set(chats) == {200}, chats
    steps_after = client.get("/health").json()["checks"]["engine"]["steps"]
    assert steps_after > steps_before + len(chats) // 2


def test_over_cap_tool_set_is_a_400_naming_the_cap(model_server):
    r = httpx.post(
        model_server.url + "/v1/chat/completions", json=_tools(MAX_TOOLS + 1), timeout=60
    )
    assert r.status_code == 400, r.text
    assert (
        f"at most {MAX_TOOLS} tools per request, not {MAX_TOOLS + 1}"
        in r.json()["error"]["message"]
    )


def test_a_grammar_compiles_once_while_cached():
    worker = GrammarWorker()
    built = []
    for _ in range(3):
        assert worker.compile("k", lambda: built.append(1) or "grammar") == "grammar"
    assert built == [1] and worker.compiles == 1
    worker.shutdown()


def test_a_compile_past_its_budget_is_refused_and_still_cached():
    worker = GrammarWorker()
    release = threading.Event()
    with pytest.raises(CompileTimeout):
        worker.compile("slow", lambda: release.wait(30) and "late", budget_s=0.2)
    release.set()
    assert worker.compile("slow", lambda: "again", budget_s=30) == "late"
    worker.shutdown()


def test_a_departed_caller_stops_waiting_and_its_queued_compile_is_dropped():
    worker = GrammarWorker()
    release, cancel = threading.Event(), threading.Event()
    ran: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(worker.compile, "busy", lambda: release.wait(30) and "busy")
        deadline = time.monotonic() + 30
        while worker.compiles == 0 and time.monotonic() < deadline:  # the worker is busy
            time.sleep(0.01)
        cancel.set()
        with pytest.raises(Cancelled):
            worker.compile("queued", lambda: ran.append("queued"), cancel=cancel)
        release.set()
        assert first.result(timeout=30) == "busy"
    assert worker.compile("after", lambda: "after") == "after"
    assert ran == [] and worker.compiles == 2
    worker.shutdown()
