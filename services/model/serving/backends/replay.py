"""The ``replay`` backend: answers from a recorded trajectory, for deterministic contract tests.

File format (``K3STACK_MODEL__REPLAY_FILE``): JSON Lines, one recorded exchange per line::

    {"kind": "chat", "fingerprint": "<sha256 hex>", "request": {...}, "response": {...}}

- ``kind``: ``"chat"`` (``/v1/chat/completions``; ``response`` is a ``chat.completion`` object)
  or ``"completion"`` (``/v1/completions``; a ``text_completion`` object).
- ``fingerprint``: :func:`fingerprint` of the request. Optional when ``request`` is given (it is
  then computed on load), so trajectories can be written by hand.
- ``request``: the request body (optional, kept for people reading the file).

A request's fingerprint is the SHA-256 of its canonical JSON (sorted keys, no spaces) after
validation, without the fields that do not change the answer: ``model``, ``stream``,
``stream_options``, ``user``, ``n``. So the same conversation asked streaming or not, under any
model name, finds the same line. When several lines share a fingerprint the first wins. Blank
lines and lines starting with ``#`` are skipped.

Streaming requests get the recorded answer as chunks (role, reasoning, content, one chunk per
tool call, finish). A request with no recording is a 404 (``code: replay_miss``) naming its
fingerprint, unless an upstream is configured (``K3STACK_MODEL__UPSTREAM_URL``): then the miss is
forwarded, appended to the file, and answered — record once, replay forever.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from services.model.serving.backends.base import Backend
from services.model.serving.protocol import (
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    Completion,
    CompletionChoice,
    CompletionRequest,
    FunctionCallDelta,
    OpenAIError,
    ToolCallDelta,
)

log = logging.getLogger("k3stack.model.replay")

Kind = Literal["chat", "completion"]
IGNORED_FIELDS = frozenset(
    {"model", "stream", "stream_options", "user", "n", "store", "metadata", "service_tier"}
)


class ReplayFileError(ValueError):
    """The trajectory file is unreadable; the message names the line."""


def fingerprint(kind: Kind, request: BaseModel | dict[str, Any]) -> str:
    """Stable hash of what determines an answer (see the module docstring)."""
    if isinstance(request, dict):
        model = ChatCompletionRequest if kind == "chat" else CompletionRequest
        request = model.model_validate(request)
    body = request.model_dump(mode="json", exclude_none=True, by_alias=True)
    body = {k: v for k, v in body.items() if k not in IGNORED_FIELDS}
    canonical = json.dumps({"kind": kind, "request": body}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_recordings(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, fingerprint) -> response dict; raises :class:`ReplayFileError` naming the line."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if not path.exists():
        return out
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{lineno}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayFileError(f"{where}: not JSON ({exc})") from None
        if not isinstance(entry, dict):
            raise ReplayFileError(f"{where}: expected an object")
        kind = entry.get("kind", "chat")
        if kind not in ("chat", "completion"):
            raise ReplayFileError(f"{where}: kind {kind!r} is not 'chat' or 'completion'")
        response = entry.get("response")
        if not isinstance(response, dict):
            raise ReplayFileError(f"{where}: 'response' object missing")
        try:
            (ChatCompletion if kind == "chat" else Completion).model_validate(response)
        except ValueError as exc:
            raise ReplayFileError(
                f"{where}: response is not a valid {kind} answer: {exc}"
            ) from None
        fp = entry.get("fingerprint")
        if not fp:
            if not isinstance(entry.get("request"), dict):
                raise ReplayFileError(f"{where}: needs 'fingerprint' or 'request'")
            try:
                fp = fingerprint(kind, entry["request"])
            except ValueError as exc:
                raise ReplayFileError(f"{where}: request is invalid: {exc}") from None
        out.setdefault((kind, str(fp)), response)
    return out


class ReplayBackend(Backend):
    name = "replay"

    def __init__(
        self, served_model_name: str, *, path: Path, record_from: Backend | None = None
    ) -> None:
        super().__init__(served_model_name)
        self.path = Path(path)
        self.record_from = record_from
        self._recordings: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = asyncio.Lock()
        self.hits = 0
        self.misses = 0

    async def start(self) -> None:
        self._recordings = load_recordings(self.path)
        if not self._recordings and self.record_from is None:
            if not self.path.exists():
                raise ReplayFileError(f"replay file {self.path} does not exist")
        log.info("replay: %d recorded answers from %s", len(self._recordings), self.path)
        if self.record_from is not None:
            await self.record_from.start()

    async def stop(self) -> None:
        if self.record_from is not None:
            await self.record_from.stop()

    def health(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "file": str(self.path),
            "recordings": len(self._recordings),
            "hits": self.hits,
            "misses": self.misses,
            "recording": self.record_from is not None,
        }

    async def _lookup(self, kind: Kind, req: ChatCompletionRequest | CompletionRequest) -> dict:
        fp = fingerprint(kind, req)
        found = self._recordings.get((kind, fp))
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        if self.record_from is None:
            raise OpenAIError(
                404,
                f"no recorded answer for this {kind} request (fingerprint {fp}) in {self.path}",
                code="replay_miss",
            )
        upstream_req = req.model_copy(update={"stream": False, "stream_options": None})
        if kind == "chat":
            answer: BaseModel = await self.record_from.chat(upstream_req)  # type: ignore[arg-type]
        else:
            answer = await self.record_from.completion(upstream_req)  # type: ignore[arg-type]
        response = answer.model_dump(mode="json", exclude_none=True)
        entry = {
            "kind": kind,
            "fingerprint": fp,
            "request": req.model_dump(mode="json", exclude_none=True, by_alias=True),
            "response": response,
        }
        async with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._recordings.setdefault((kind, fp), response)
        return response

    def _named(self, response: dict[str, Any], model: type[BaseModel]) -> Any:
        out = model.model_validate(response)
        out.model = self.served_model_name  # type: ignore[attr-defined]
        return out

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletion:
        return self._named(await self._lookup("chat", req), ChatCompletion)

    async def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        answer: ChatCompletion = self._named(await self._lookup("chat", req), ChatCompletion)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        for chunk in chat_chunks(answer, include_usage=include_usage):
            yield chunk

    async def completion(self, req: CompletionRequest) -> Completion:
        return self._named(await self._lookup("completion", req), Completion)

    async def completion_stream(self, req: CompletionRequest) -> AsyncIterator[Completion]:
        answer: Completion = self._named(await self._lookup("completion", req), Completion)
        for choice in answer.choices:
            yield Completion(
                id=answer.id,
                created=answer.created,
                model=answer.model,
                choices=[
                    CompletionChoice(
                        index=choice.index, text=choice.text, finish_reason=choice.finish_reason
                    )
                ],
            )
        if req.stream_options and req.stream_options.include_usage and answer.usage:
            yield Completion(
                id=answer.id,
                created=answer.created,
                model=answer.model,
                choices=[],
                usage=answer.usage,
            )


def chat_chunks(
    answer: ChatCompletion, *, include_usage: bool = False
) -> list[ChatCompletionChunk]:
    """A complete answer as the chunks a streaming server would have sent."""
    created = answer.created or int(time.time())
    chunks: list[ChatCompletionChunk] = []

    def add(delta: ChatDelta, index: int = 0, finish: str | None = None) -> None:
        chunks.append(
            ChatCompletionChunk(
                id=answer.id,
                created=created,
                model=answer.model,
                choices=[ChatChunkChoice(index=index, delta=delta, finish_reason=finish)],
            )
        )

    for choice in answer.choices:
        msg = choice.message
        add(ChatDelta(role="assistant", content=""), choice.index)
        if msg.reasoning_content:
            add(ChatDelta(reasoning_content=msg.reasoning_content), choice.index)
        if msg.content:
            add(ChatDelta(content=msg.content), choice.index)
        for i, call in enumerate(msg.tool_calls or []):
            add(
                ChatDelta(
                    tool_calls=[
                        ToolCallDelta(
                            index=i,
                            id=call.id,
                            type="function",
                            function=FunctionCallDelta(
                                name=call.function.name, arguments=call.function.arguments
                            ),
                        )
                    ]
                ),
                choice.index,
            )
        add(ChatDelta(), choice.index, choice.finish_reason or "stop")
    if include_usage and answer.usage is not None:
        chunks.append(
            ChatCompletionChunk(
                id=answer.id, created=created, model=answer.model, choices=[], usage=answer.usage
            )
        )
    return chunks
