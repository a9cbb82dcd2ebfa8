"""The recording gateway's exchanges as trajectory model steps (and so ATIF agent steps).

One exchange is one model call of the real CLI: its answer (a JSON body, or every event of a
stream) becomes the assistant message (text and tool calls, whichever API: Anthropic Messages,
Responses, Chat Completions), its usage, finish reason, token ids and logprobs (when the policy
returned them, aligned one-to-one) and latency the generation; the request's fields besides the
conversation and tools are the step's options, with what the gateway knew (API, status, whether
the client left, the oracle's call). The tool results the CLI sends back in its next request
become the observations of the step that made the calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

_CONVERSATION = {"messages", "input", "tools", "system", "instructions"}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            p.get("text") or p.get("content") or "" if isinstance(p, dict) else str(p)
            for p in value
        )
    return "" if value is None else json.dumps(value)


def _answer(api: str, item: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed answer, or the one a stream's events add up to, in its API's shape."""
    if "response" in item:
        return item["response"] if isinstance(item["response"], dict) else {}
    events = [e for e in item.get("events") or [] if isinstance(e, dict)]
    if api == "messages":
        return _anthropic_events(events)
    if api == "responses":
        ends = ("response.completed", "response.incomplete", "response.failed")
        done = next((e["response"] for e in events if e.get("type") in ends), None)
        items = [e["item"] for e in events if e.get("type") == "response.output_item.done"]
        return {**(done or {}), "output": (done or {}).get("output") or items}
    return _chat_chunks(events)


def _anthropic_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"content": []}
    for e in events:
        kind = e.get("type")
        if kind == "message_start":
            message.update({**e.get("message", {}), "content": []})
        elif kind == "content_block_start":
            message["content"].append({**e["content_block"], "_json": ""})
        elif kind == "content_block_delta" and message["content"]:
            block, delta = message["content"][-1], e.get("delta", {})
            block["text"] = block.get("text", "") + delta.get("text", "")
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            block["_json"] += delta.get("partial_json", "")
        elif kind == "message_delta":
            message["stop_reason"] = e.get("delta", {}).get("stop_reason")
            message["usage"] = {**(message.get("usage") or {}), **(e.get("usage") or {})}
    for block in message["content"]:
        raw = block.pop("_json")
        if block.get("type") == "tool_use" and raw:
            try:
                block["input"] = json.loads(raw)
            except json.JSONDecodeError:  # cut short (the client left): kept as it came
                block["input"] = {"_partial_json": raw}
    return message


def _chat_chunks(events: list[dict[str, Any]]) -> dict[str, Any]:
    text, thought, calls, finish, usage, model, ids, lps = "", "", {}, None, None, None, [], []
    for e in events:
        model, usage = e.get("model") or model, e.get("usage") or usage
        for c in e.get("choices") or []:
            delta = c.get("delta") or {}
            text += delta.get("content") or ""
            thought += delta.get("reasoning_content") or ""
            ids += c.get("token_ids") or []
            lps += (c.get("logprobs") or {}).get("content") or []
            finish = c.get("finish_reason") or finish
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "args": ""})
                fn = tc.get("function") or {}
                call["id"] = tc.get("id") or call["id"]
                call["name"] += fn.get("name") or ""
                call["args"] += fn.get("arguments") or ""
    tool_calls = [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["args"]}}
        for c in calls.values()
    ]
    message = {"role": "assistant", "content": text, "tool_calls": tool_calls or None,
               "reasoning_content": thought or None}  # fmt: skip
    choice = {"message": message, "finish_reason": finish, "token_ids": ids or None,
              "logprobs": {"content": lps} if lps else None}  # fmt: skip
    return {"model": model, "usage": usage, "choices": [choice]}


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def _message(api: str, answer: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the assistant message, the generation's fields) of one answer."""
    usage = answer.get("usage") or {}
    if api == "messages":
        blocks = answer.get("content") or []
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        thought = "".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking")
        calls = [
            _call(b["id"], b["name"], b.get("input")) for b in blocks if b.get("type") == "tool_use"
        ]
        finish = answer.get("stop_reason")
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
        ids = logprobs = None
    elif api == "responses":
        out = answer.get("output") or []
        text = "".join(
            _text(o.get("content")) for o in out if o.get("type") == "message"
        )  # fmt: skip
        thought = "".join(_text(o.get("content")) for o in out if o.get("type") == "reasoning")
        calls = [
            _call(o.get("call_id") or o.get("id"), o["name"], o.get("arguments", o.get("input")))
            for o in out
            if o.get("type") in ("function_call", "custom_tool_call")
        ]
        finish = answer.get("status")
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
        ids = logprobs = None
    else:
        choice = (answer.get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        text, calls = msg.get("content") or "", msg.get("tool_calls") or []
        thought = msg.get("reasoning_content") or ""
        finish = choice.get("finish_reason")
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        ids = choice.get("token_ids")
        lp = (choice.get("logprobs") or {}).get("content")
        logprobs = [t["logprob"] for t in lp] if lp else None
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            logprobs = None
    message = {"role": "assistant", "content": text, "tool_calls": calls or None,
               "reasoning_content": thought or None}  # fmt: skip
    gen = {"model": answer.get("model"), "finish_reason": finish, "response_id": answer.get("id"),
           "completion_token_ids": ids, "logprobs": logprobs,
           "usage": (prompt, completion) if prompt is not None or completion is not None else None}  # fmt: skip
    return message, gen


def _results(api: str, request: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(call id, content, is_error) of the tool results a request carries."""
    out = []
    if api == "messages":
        for m in request.get("messages") or []:
            for b in m.get("content") if isinstance(m.get("content"), list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out.append((b["tool_use_id"], _text(b.get("content")), bool(b.get("is_error"))))
    elif api == "responses":
        for i in request.get("input") if isinstance(request.get("input"), list) else []:
            if isinstance(i, dict) and i.get("type", "").endswith("_call_output"):
                out.append((i.get("call_id", ""), _text(i.get("output")), False))
    else:
        for m in request.get("messages") or []:
            if isinstance(m, dict) and m.get("role") == "tool":
                out.append((m.get("tool_call_id", ""), _text(m.get("content")), False))
    return out


def _alnum(call_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", call_id)


def exchange_message(item: dict[str, Any]) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """(the assistant message, (prompt, completion) tokens or None) of one recorded exchange."""
    api = item.get("api", "")
    message, gen = _message(api, _answer(api, item))
    usage = gen["usage"]
    return message, (usage[0] or 0, usage[1] or 0) if usage is not None else None


def exchange_results(item: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(call id, content, is_error) of the tool results one exchange's request sends back."""
    return _results(item.get("api", ""), item.get("request") or {})


def same_call(a: str, b: str) -> bool:
    """Whether two call ids name one call (OpenClaw drops an id's non-alphanumerics)."""
    return a == b or _alnum(a) == _alnum(b)


def add_exchange(traj: Any, item: dict[str, Any], pending: set[str]) -> None:
    """Add one gateway exchange to ``traj``; ``pending`` holds the call ids still unanswered."""
    from shared.chat import ChatMessage, Usage
    from shared.trajectory import Generation

    api, request = item.get("api", ""), item.get("request") or {}
    for call_id, content, is_error in _results(api, request):
        # OpenClaw sends a call's id back with its non-alphanumerics dropped
        same = next((p for p in pending if same_call(p, call_id)), None)
        if same is not None:
            pending.discard(same)
            traj.add_observation(same, content, is_error=is_error, timestamp=item["at"])
    message, gen = _message(api, _answer(api, item))
    usage = gen.pop("usage")
    if usage is not None:
        prompt, completion = usage[0] or 0, usage[1] or 0
        gen["usage"] = Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )
    latency = item.get("latency_s")
    generation = Generation(**gen, latency_ms=latency * 1000 if latency is not None else None)
    options = {k: v for k, v in request.items() if k not in _CONVERSATION}
    options["gateway"] = {
        k: item.get(k)
        for k in ("api", "status", "client_gone", "oracle_call", "agent", "error")
        if item.get(k) is not None
    }
    step = traj.add_model_step(
        ChatMessage.model_validate(message), generation, options=options, timestamp=item["at"]
    )
    pending.update(c.id for c in step.message.tool_calls or [])
