"""Colleagues (NPCs) who answer the agent: by script, or through a model endpoint.

A script is a list of branches ``{"if_contains": [...], "if_verdict": "approve", "text": …}``
tried in order
against the text of the action that triggered the event (the agent's mail); the first whose
words all appear wins, and a branch without ``if_contains`` is the default. When
``K3STACK_TOOLS__NPC_MODEL_URL`` names an OpenAI-compatible endpoint and the effect sets
``model: true``, the colleague writes the reply with it instead (persona + thread + the
scripted intent as guidance), falling back to the script if the call fails — so a world
without a model stays fully deterministic.
"""

from __future__ import annotations

import logging
from typing import Any

import openai

from services.tools.apps.gmail.ops import deliver, find_by_msgid
from services.tools.context import WorldContext
from services.tools.events.registry import EffectEnv, effect
from shared.llm import chat_text, openai_client

log = logging.getLogger("k3stack.tools.npc")


def choose_script(script: list[dict[str, Any]], text: str) -> str:
    """The first branch whose ``if_contains`` words all appear and whose ``if_verdict`` (if
    any) is exactly what the agent's text committed to (see ``events.verdicts``)."""
    from services.tools.events.verdicts import verdicts

    low = text.lower()
    said = verdicts(text)
    for branch in script:
        needles = [s.lower() for s in branch.get("if_contains", [])]
        if branch.get("if_verdict") and said != {branch["if_verdict"]}:
            continue
        if all(n in low for n in needles):
            return branch["text"]
    return ""


def model_reply(url: str, persona: dict[str, Any], thread: str, intent: str) -> str | None:
    prompt = (
        f"You are {persona.get('name')}, {persona.get('role') or 'a colleague'}. Write a short "
        f"email reply (plain text, no subject line). Say this in your own words: {intent}\n\n"
        f"The conversation so far:\n{thread[-4000:]}"
    )
    try:
        client = openai_client(base_url=url)  # the platform's one way to call a model
        messages = [{"role": "user", "content": prompt}]
        model = persona.get("model", "default")
        return (
            chat_text(messages, client=client, model=model, temperature=0, max_tokens=300).strip()
            or None
        )
    except (openai.OpenAIError, KeyError, IndexError, ValueError, TypeError) as exc:
        log.warning("NPC model call failed, using the script: %s", exc)
        return None


@effect("npc.reply")
def reply(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """``persona`` answers by mail in the thread of ``thread_msgid`` (args as gmail.deliver,
    plus ``script``)."""
    trigger_text = (env.trigger or {}).get("text", "")
    text = choose_script(args.get("script", []), trigger_text) or args.get("body", "")
    if args.get("model") and env.npc_model_url:
        parent = find_by_msgid(ctx, args["thread_msgid"]) if args.get("thread_msgid") else None
        thread = (parent.text if parent is not None else "") + "\n\n" + trigger_text
        text = model_reply(env.npc_model_url, args["persona"], thread, text) or text
    latest = None
    thread_msgid = args.get("thread_msgid") or (env.trigger or {}).get("rfc822msgid")
    if thread_msgid:
        from services.tools.apps.gmail.actions import thread_rows

        parent = find_by_msgid(ctx, thread_msgid)
        if parent is not None:
            latest = thread_rows(ctx, parent.thread_id)[-1]
    subject = args.get("subject") or (
        ("Re: " + latest.subject.removeprefix("Re: ")) if latest is not None else "(no subject)"
    )
    deliver(
        ctx,
        {
            "from": args["persona"],
            "subject": subject,
            "body": text,
            "message_id": args.get("message_id"),
            "in_reply_to": latest.rfc822_id if latest is not None else None,
            "cc": args.get("cc", []),
            "attachments": args.get("attachments"),
        },
        env,
    )
