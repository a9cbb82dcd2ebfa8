"""What a compaction keeps: OpenClaw's tail share counts each kept message by its own size (the
tool schemas are in the context once, not once per message), and a claude-code summary keeps
the task instruction and restates the latest clock notice."""

from __future__ import annotations

from services.orchestrator.context.compaction import Compactor, units
from services.orchestrator.context.tokens import ApproxTokenCounter
from services.orchestrator.harness.config import load_harness

# ~8K approximate tokens of tool schemas, as an OpenClaw world episode offers
TOOLS = [
    {"type": "function", "function": {"name": f"app__tool_{i}", "description": "d" * 600,
                                      "parameters": {"type": "object", "properties": {}}}}
    for i in range(48)
]  # fmt: skip
TASK = "You are the assistant of Ana. Handle what arrives."
NOTICE = "[World clock: Tuesday 2026-03-03 09:00] 2 new item(s) arrived. Check your mail."


def conversation(turns: int, notice_at: int) -> list[dict]:
    out = [{"role": "system", "content": "sys"}, {"role": "user", "content": TASK}]
    for n in range(turns):
        if n == notice_at:
            out.append({"role": "user", "content": NOTICE})
        out.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "app__tool_1", "arguments": '{"q": 1}'},
                    }
                ],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n} " * 40})
    return out  # fmt: skip


def summarize(messages, prompt) -> str:
    return "summary of the work so far"


def test_openclaw_keeps_a_tenth_of_its_window_of_recent_units() -> None:
    cfg = load_harness("openclaw").context
    comp = Compactor(cfg, 20_000, ApproxTokenCounter(), summarize, TOOLS)
    messages = conversation(60, notice_at=50)
    out = comp.compact(messages)
    kept_tail = units(out.messages[1:])[2:]  # after the task and the summary
    # each unit is ~100 tokens: a 2,000-token tail share holds well over a dozen of them
    assert len(kept_tail) >= 10, len(kept_tail)
    assert out.tokens_after < comp.threshold


def test_claude_code_summary_keeps_the_task_and_the_latest_clock_notice() -> None:
    cfg = load_harness("claude-code").context
    comp = Compactor(cfg, 20_000, ApproxTokenCounter(), summarize, TOOLS)
    messages = conversation(60, notice_at=40)
    out = comp.compact(messages)
    contents = [m.get("content") for m in out.messages]
    assert contents[1] == TASK
    assert NOTICE in contents
    assert contents.index(NOTICE) == 3  # right after the summary
    assert out.tokens_after < comp.threshold
