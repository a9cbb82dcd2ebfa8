"""Fidelity of a white-box preset to the real CLI it imitates, from two episodes' trajectories.

Both are run with the oracle (the white-box loop's oracle policy, the gateway's oracle engine),
so the same calls are made and only the harnesses differ: which tools each offers and calls,
with which argument names, how big its system prompt is, how many model requests it makes per
simulated day, how large a request is, and when the context was compacted. The real CLI's
request sizes are its request bodies' characters / 4 (a named estimate: the oracle engine has
no tokenizer); its compaction is a request whose context shrank by more than a third.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any


def _args(arguments: Any) -> list[str]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return []
    return sorted(arguments) if isinstance(arguments, dict) else []


def white_box(doc: dict[str, Any]) -> dict[str, Any]:
    items = doc["items"]
    specs = next((i["tools"] for i in items if i["kind"] == "tools"), [])
    names = [t.get("function", t).get("name") for t in specs]
    system = next((i["message"]["content"] for i in items if i["kind"] == "system"), "")
    calls, per_day, tokens, day = [], Counter(), [], 1
    for i in items:
        if i["kind"] == "clock":
            day = i.get("day") or day
        elif i["kind"] == "assistant":
            per_day[day] += 1
            tokens.append(int(i.get("prompt_tokens_counted") or 0))
            for c in i["message"].get("tool_calls") or []:
                calls.append((c["function"]["name"], _args(c["function"]["arguments"])))
    compactions = [i.get("tokens_before") for i in items if i["kind"] == "compaction"]
    return _row(names, calls, len(str(system)), per_day, tokens, compactions)


def _request_text(api: str, body: dict[str, Any]) -> str:
    if api == "messages":
        system = body.get("system") or ""
        parts = [system] if isinstance(system, str) else [b.get("text", "") for b in system]
        return "".join(parts)
    if api == "chat/completions":
        return "".join(
            m.get("content") if isinstance(m.get("content"), str) else ""
            for m in body.get("messages") or []
            if isinstance(m, dict) and m.get("role") in ("system", "developer")
        )
    dev = [
        p.get("text", "")
        for item in body.get("input") or []
        if isinstance(item, dict) and item.get("role") in ("developer", "system")
        for p in (item.get("content") if isinstance(item.get("content"), list) else [])
    ]
    return (body.get("instructions") or "") + "".join(dev)


def _flat_tools(tools: list[dict[str, Any]]) -> list[str]:
    out = []
    for t in tools:
        if t.get("type") == "namespace":
            out += [f"{t['name']}__{u.get('name')}" for u in t.get("tools") or []]
        elif t.get("name"):
            out.append(t["name"])
        elif isinstance(t.get("function"), dict):  # Chat Completions
            out.append(t["function"].get("name"))
    return out


def _calls(events: list[Any]) -> list[tuple[str, list[str]]]:
    """The tool calls in an answer's stream (Anthropic tool_use blocks, Responses items, Chat
    Completions chunks)."""
    out, name, buf = [], None, ""
    chat: dict[int, list[str]] = {}
    for e in events:
        for choice in (e.get("choices") or []) if isinstance(e, dict) else []:
            for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                fn = tc.get("function") or {}
                got = chat.setdefault(tc.get("index", 0), ["", ""])
                got[0] += fn.get("name") or ""
                got[1] += fn.get("arguments") or ""
        kind = e.get("type") if isinstance(e, dict) else None
        if kind == "content_block_start" and e["content_block"].get("type") == "tool_use":
            name, buf = e["content_block"]["name"], ""
        elif kind == "content_block_delta" and name:
            buf += e["delta"].get("partial_json", "")
        elif kind == "content_block_stop" and name:
            out.append((name, _args(buf or "{}")))
            name = None
        elif kind == "response.output_item.done" and e["item"].get("type") == "function_call":
            out.append((e["item"]["name"], _args(e["item"].get("arguments"))))
    return out + [(n, _args(a or "{}")) for n, a in chat.values()]


def installed(doc: dict[str, Any]) -> dict[str, Any]:
    items = doc["items"]
    exchanges = [i for i in items if i["kind"] == "exchange"]
    # the first request of the agent's loop (one with tools: side calls carry none)
    main = next((x for x in exchanges if x["request"].get("tools")), exchanges[0] if exchanges
                else None)  # fmt: skip
    first = main["request"] if main else {}
    api = main["api"] if main else "messages"
    calls, per_day, tokens, compactions, day, last = [], Counter(), [], [], 1, 0
    for i in items:
        if i["kind"] == "clock":
            day = i.get("day") or day
        elif i["kind"] == "exchange":
            per_day[day] += 1
            size = len(json.dumps(i["request"])) // 4
            context = len(json.dumps(i["request"].get("messages") or i["request"].get("input")))
            if last and context < last * 2 / 3:
                compactions.append(size)
            last = context
            tokens.append(size)
            calls += _calls(i.get("events") or [])
    return _row(
        _flat_tools(first.get("tools") or []), calls, len(_request_text(api, first)), per_day,
        tokens, compactions,
    )  # fmt: skip


def _row(names, calls, system_chars, per_day, tokens, compactions) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    native = sorted(n for n in names if n and not n.startswith("mcp__"))
    used = sorted({n for n, _ in calls})
    days = max(1, len(per_day))
    return {
        "native tools offered": ", ".join(native),
        "world tools offered": sum(1 for n in names if n and n.startswith("mcp__")),
        "tools called": ", ".join(used[:6]) + (" ..." if len(used) > 6 else ""),
        "argument names": ", ".join(sorted({a for _, args in calls for a in args})[:8]),
        "system prompt (chars)": system_chars,
        "requests per day": round(sum(per_day.values()) / days, 1),
        "tokens per request (mean)": round(sum(tokens) / len(tokens)) if tokens else 0,
        "compactions (at tokens)": ", ".join(str(c) for c in compactions) or "none",
    }


def table(white: dict[str, Any], real: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(k, str(white[k]), str(real[k])) for k in white]


def fidelity(doc: dict[str, Any]) -> dict[str, Any]:
    """The row of an episode of either kind (an installed one carries an ``agent`` item)."""
    if any(i["kind"] == "agent" for i in doc["items"]):
        return installed(doc)
    return white_box(doc)
