"""The ``openai`` backend: forward to any OpenAI-compatible endpoint with httpx, streaming too
(server-sent events read with httpx-sse).

Requests are re-serialised from the validated models (so the upstream sees a clean body), with
``model`` mapped to ``upstream_model``; answers come back with ``model`` set to this server's
served name. Upstream 4xx answers pass through with their message; an unreachable upstream or
a 5xx is a 502, so callers can tell "you sent something wrong" from "the upstream broke".
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx
from httpx_sse import EventSource, SSEError
from pydantic import BaseModel, ValidationError

from services.model.serving.backends.base import Backend
from services.model.serving.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    OpenAIError,
    TokenizeRequest,
    TokenizeResponse,
)

log = logging.getLogger("k3stack.model.openai_proxy")
M = TypeVar("M", bound=BaseModel)


def normalise_base_url(url: str) -> str:
    """``http://h:p`` or ``http://h:p/v1`` -> ``http://h:p/v1`` (the OpenAI base URL)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _upstream_error(resp: httpx.Response, body: bytes) -> OpenAIError:
    message, param, code = body.decode(errors="replace")[:2000] or resp.reason_phrase, None, None
    try:
        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message", message))
            param, code = err.get("param"), err.get("code")
        elif isinstance(data, dict) and "message" in data:
            message = str(data["message"])
    except ValueError:
        pass
    if resp.status_code >= 500:
        return OpenAIError(
            502, f"upstream answered {resp.status_code}: {message}", type="upstream_error"
        )
    return OpenAIError(resp.status_code, message, param=param, code=code and str(code))


class OpenAIProxyBackend(Backend):
    name = "openai"

    def __init__(
        self,
        served_model_name: str,
        *,
        upstream_url: str,
        upstream_model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(served_model_name)
        self.base_url = normalise_base_url(upstream_url)
        self.upstream_model = upstream_model or served_model_name
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
        )

    async def stop(self) -> None:
        await self._client.aclose()

    def health(self) -> dict[str, Any]:
        return {"engine": self.name, "upstream": self.base_url, "model": self.upstream_model}

    def _body(self, req: BaseModel) -> dict[str, Any]:
        body = req.model_dump(exclude_none=True, by_alias=True)
        body["model"] = self.upstream_model
        return body

    async def _post(self, path: str, body: dict[str, Any], model: type[M]) -> M:
        try:
            resp = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise OpenAIError(
                502, f"upstream {self.base_url} unreachable: {exc}", type="upstream_error"
            ) from exc
        if resp.status_code >= 400:
            raise _upstream_error(resp, resp.content)
        try:
            out = model.model_validate(resp.json())
        except (ValueError, ValidationError) as exc:
            raise OpenAIError(
                502, f"upstream answered a malformed {model.__name__}: {exc}", type="upstream_error"
            ) from exc
        if hasattr(out, "model"):
            out.model = self.served_model_name  # type: ignore[attr-defined]
        return out

    async def _stream(self, path: str, body: dict[str, Any], model: type[M]) -> AsyncIterator[M]:
        body = {**body, "stream": True}
        try:
            cm = self._client.stream("POST", path, json=body)
            resp = await cm.__aenter__()
        except httpx.HTTPError as exc:
            raise OpenAIError(
                502, f"upstream {self.base_url} unreachable: {exc}", type="upstream_error"
            ) from exc
        try:
            if resp.status_code >= 400:
                raise _upstream_error(resp, await resp.aread())
            async for event in EventSource(resp).aiter_sse():
                data = event.data.strip()
                if not data:
                    continue
                if data == "[DONE]":
                    break
                try:
                    payload = json.loads(data)
                except ValueError:
                    log.warning("upstream sent a non-JSON event: %.200s", data)
                    continue
                if isinstance(payload, dict) and "error" in payload and "choices" not in payload:
                    err = payload["error"] if isinstance(payload["error"], dict) else {}
                    raise OpenAIError(
                        502,
                        f"upstream stream failed: {err.get('message', payload['error'])}",
                        type="upstream_error",
                    )
                item = model.model_validate(payload)
                if hasattr(item, "model"):
                    item.model = self.served_model_name  # type: ignore[attr-defined]
                yield item
        except (httpx.HTTPError, SSEError) as exc:
            raise OpenAIError(502, f"upstream stream broke: {exc}", type="upstream_error") from exc
        finally:
            await cm.__aexit__(None, None, None)

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletion:
        return await self._post("/chat/completions", self._body(req), ChatCompletion)

    def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        return self._stream("/chat/completions", self._body(req), ChatCompletionChunk)

    async def completion(self, req: CompletionRequest) -> Completion:
        return await self._post("/completions", self._body(req), Completion)

    def completion_stream(self, req: CompletionRequest) -> AsyncIterator[Completion]:
        return self._stream("/completions", self._body(req), Completion)

    async def tokenize(self, req: TokenizeRequest) -> TokenizeResponse:
        """Forwarded to ``/v1/tokenize`` (k3stack, vLLM-style servers); others answer 501."""
        try:
            return await self._post("/tokenize", self._body(req), TokenizeResponse)
        except OpenAIError as exc:
            if exc.status in (404, 405):
                raise OpenAIError(
                    501, "the upstream endpoint does not tokenize", code="not_implemented"
                ) from exc
            raise
