"""The interface every engine sits behind, so the ``/v1`` routes never know which one runs."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from services.model.serving.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    ModelCard,
    OpenAIError,
    TokenizeRequest,
    TokenizeResponse,
)


class Backend(ABC):
    """One engine behind the OpenAI-compatible API.

    Streaming methods are async generators that raise request errors (:class:`OpenAIError`)
    before their first chunk, so the route can still answer 400 instead of a broken stream.
    """

    name: str = "backend"

    def __init__(self, served_model_name: str) -> None:
        self.served_model_name = served_model_name
        self.created = int(time.time())

    async def start(self) -> None:
        """Acquire resources (load the model, launch or reach a server); default: none."""
        return None

    async def stop(self) -> None:
        """Release them; must be safe to call after a failed :meth:`start`."""
        return None

    def models(self) -> list[ModelCard]:
        return [ModelCard(id=self.served_model_name, created=self.created)]

    def check_model(self, model: str | None) -> None:
        """Unknown model ids are a 404, as OpenAI answers them."""
        if model is None:
            return
        ids = [m.id for m in self.models()]
        if model not in ids:
            raise OpenAIError(
                404,
                f"the model {model!r} does not exist; this server serves {ids}",
                param="model",
                code="model_not_found",
            )

    @abstractmethod
    async def chat(self, req: ChatCompletionRequest) -> ChatCompletion: ...

    @abstractmethod
    def chat_stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]: ...

    @abstractmethod
    async def completion(self, req: CompletionRequest) -> Completion: ...

    @abstractmethod
    def completion_stream(self, req: CompletionRequest) -> AsyncIterator[Completion]: ...

    async def tokenize(self, req: TokenizeRequest) -> TokenizeResponse:
        raise OpenAIError(501, f"the {self.name} engine does not tokenize", code="not_implemented")

    async def detokenize(self, req: DetokenizeRequest) -> DetokenizeResponse:
        raise OpenAIError(
            501, f"the {self.name} engine does not detokenize", code="not_implemented"
        )

    def health(self) -> dict[str, Any]:
        return {"engine": self.name}
