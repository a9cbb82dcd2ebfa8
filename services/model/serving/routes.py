"""The OpenAI-compatible routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``
(and ``/v1/models/{id}``), ``/v1/tokenize``, ``/v1/detokenize``. Every 4xx/5xx on ``/v1`` uses
OpenAI's error envelope (``{"error": {"message", "type", "param", "code"}}``), which the official
clients parse; the rest of the service keeps the project's shared error body.

A non-streaming request whose client disconnects is cancelled, which aborts its generation (a
streaming one stops when its response stream is closed).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.model.serving import messages_api
from services.model.serving import response_store as stored
from services.model.serving import responses as responses_api
from services.model.serving.backends.base import Backend
from services.model.serving.client_tools import answer_headers
from services.model.serving.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    ModelCard,
    ModelList,
    OpenAIError,
    OpenAIErrorResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from shared import sse
from shared.errors import APIError

log = logging.getLogger("k3stack.model.api")

V1 = "/v1"
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": OpenAIErrorResponse, "description": "Malformed request"},
    404: {"model": OpenAIErrorResponse, "description": "Unknown model"},
    413: {"model": OpenAIErrorResponse, "description": "Body over the size limit"},
    429: {"model": OpenAIErrorResponse, "description": "Engine saturated (see Retry-After)"},
    500: {"model": OpenAIErrorResponse, "description": "Engine error"},
}
_SSE = {"text/event-stream": {"schema": {"type": "string"}}}

router = APIRouter(tags=["openai"])


def _backend(request: Request) -> Backend:
    return request.app.state.backend


T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it (and so aborting its generation) if the client leaves."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        log.info("client went away; request cancelled")
        raise ClientGone
    return task.result()


def _sse_line(obj: BaseModel | dict[str, Any] | str) -> str:
    if isinstance(obj, BaseModel):
        data = obj.model_dump_json(exclude_none=True)
    elif isinstance(obj, dict):
        data = json.dumps(obj)
    else:
        data = obj
    return sse.event(data)


def _with_headers(answer: Any, headers: dict[str, str], exclude_none: bool = True) -> Any:
    """``answer`` (a model or a streaming response) with the client-fidelity headers."""
    if not headers:
        return answer
    if isinstance(answer, BaseModel):
        answer = JSONResponse(answer.model_dump(mode="json", exclude_none=exclude_none))
    answer.headers.update(headers)
    return answer


async def _event_stream(
    agen: AsyncIterator[Any],
    line: Callable[[Any], str] = _sse_line,
    done: str | None = _sse_line("[DONE]"),
    request: Request | None = None,
) -> StreamingResponse:
    """Start ``agen`` so request errors still answer 4xx, then stream it as server-sent events
    (each item written by ``line``, then ``done``). The first item may wait for the whole
    prefill: a client that leaves meanwhile aborts it (``request`` watched for the disconnect)."""
    try:
        start = agen.__anext__()
        first = await (until_disconnect(request, start) if request is not None else start)
    except StopAsyncIteration:
        first = None
    except ClientGone:
        await agen.aclose()  # type: ignore[attr-defined]
        raise

    async def body() -> AsyncIterator[str]:
        try:
            if first is not None:
                yield line(first)
            async for item in agen:
                yield line(item)
        except OpenAIError as exc:
            yield line(exc.body().model_dump())
        except Exception as exc:  # noqa: BLE001 - a stream cannot change its status any more
            log.exception("stream failed")
            yield line(
                OpenAIError(500, f"stream failed: {exc}", type="server_error").body().model_dump()
            )
        finally:
            await agen.aclose()  # type: ignore[attr-defined]
        if done is not None:
            yield done

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    response_model_exclude_none=True,
    responses={**_ERRORS, 200: {"content": _SSE, "description": "JSON, or SSE when stream"}},
    operation_id="createChatCompletion",
)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Any:
    """Chat with tools, reasoning and streaming, as OpenAI's endpoint of the same name."""
    backend = _backend(request)
    backend.check_model(body.model)
    if body.stream:
        return await _event_stream(backend.chat_stream(body), request=request)
    answer = await until_disconnect(request, backend.chat(body))
    data = answer.model_dump(mode="json", exclude_none=True)
    for choice in data.get("choices", []):
        # OpenAI always sends "content" (null for tool-call-only turns); raw-JSON clients index it.
        choice.setdefault("message", {}).setdefault("content", None)
    return JSONResponse(data)


@router.post(
    "/v1/completions",
    response_model=Completion,
    response_model_exclude_none=True,
    responses={**_ERRORS, 200: {"content": _SSE, "description": "JSON, or SSE when stream"}},
    operation_id="createCompletion",
)
async def create_completion(body: CompletionRequest, request: Request) -> Any:
    """Raw completion of a prompt (XTML markers in the text become special tokens)."""
    backend = _backend(request)
    backend.check_model(body.model)
    if body.stream:
        return await _event_stream(backend.completion_stream(body), request=request)
    return await until_disconnect(request, backend.completion(body))


@router.post(
    "/v1/responses",
    response_model=responses_api.ResponseObject,
    response_model_exclude_none=True,
    responses={**_ERRORS, 200: {"content": _SSE, "description": "JSON, or SSE when stream"}},
    operation_id="createResponse",
)
async def create_response(body: responses_api.ResponsesRequest, request: Request) -> Any:
    """OpenAI's Responses API (input items, function tools, reasoning items, streaming events),
    answered by the chat engine; kept for ``previous_response_id`` unless ``store`` is false."""
    backend = _backend(request)
    backend.check_model(body.model)
    store = stored.store_of(request)
    body, conversation = await stored.with_history(store, body)
    offered = responses_api.offered_tools(body)
    chat = responses_api.to_chat_request(body, offered)
    headers = answer_headers(body.ignored_fields(), offered.warnings)
    if body.stream:
        events = responses_api.stream_events(
            body, backend.served_model_name, backend.chat_stream(chat), offered
        )
        events = stored.keep_streamed(store, body, conversation, events)
        return _with_headers(
            await _event_stream(events, responses_api.sse, done=None, request=request), headers
        )
    answer = await until_disconnect(request, backend.chat(chat))
    response = responses_api.from_chat(body, answer, offered)
    await stored.keep(store, body, conversation, response.model_dump(mode="json"))
    return _with_headers(response, headers)


@router.get(
    "/v1/responses/{response_id}",
    response_model=responses_api.ResponseObject,
    response_model_exclude_none=True,
    responses=_ERRORS,
    operation_id="retrieveResponse",
)
async def retrieve_response(response_id: str, request: Request) -> Any:
    """A stored response (``client.responses.retrieve``); unknown or expired ids are a 404."""
    return JSONResponse(await stored.retrieve(stored.store_of(request), response_id))


@router.delete(
    "/v1/responses/{response_id}",
    response_model=responses_api.ResponseDeleted,
    responses=_ERRORS,
    operation_id="deleteResponse",
)
async def delete_response(response_id: str, request: Request) -> responses_api.ResponseDeleted:
    """Forget a stored response (``client.responses.delete``)."""
    await stored.forget(stored.store_of(request), response_id)
    return responses_api.ResponseDeleted(id=response_id)


_ANTHROPIC_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": messages_api.ErrorResponse, "description": doc}
    for status, doc in ((400, "Malformed request"), (404, "Unknown model"), (500, "Engine error"))
}


@router.post(
    "/v1/messages",
    response_model=messages_api.Message,
    responses={**_ANTHROPIC_ERRORS, 200: {"content": _SSE, "description": "JSON, or SSE"}},
    operation_id="createMessage",
    tags=["anthropic"],
)
async def create_message(body: messages_api.MessagesRequest, request: Request) -> Any:
    """Anthropic's Messages API (system, content blocks, tool_use / tool_result, thinking,
    streaming events), answered by the chat engine."""
    backend = _backend(request)
    backend.check_model(body.model)
    offered = messages_api.offered_tools(body)
    chat = messages_api.to_chat_request(body, offered)
    headers = answer_headers(body.ignored_fields(), offered.warnings)
    if body.stream:
        events = messages_api.stream_events(backend.served_model_name, backend.chat_stream(chat))
        return _with_headers(
            await _event_stream(events, messages_api.sse, done=None, request=request), headers
        )
    answer = await until_disconnect(request, backend.chat(chat))
    return _with_headers(messages_api.from_chat(answer), headers, exclude_none=False)


@router.post(
    "/v1/messages/count_tokens",
    response_model=messages_api.CountTokensResponse,
    responses=_ANTHROPIC_ERRORS,
    operation_id="countMessageTokens",
    tags=["anthropic"],
)
async def count_message_tokens(
    body: messages_api.CountTokensRequest, request: Request
) -> messages_api.CountTokensResponse:
    """Tokens the messages (with system and tools) take as a prompt, by the model's tokenizer."""
    backend = _backend(request)
    backend.check_model(body.model)
    counted = await backend.tokenize(messages_api.to_tokenize_request(body))
    return messages_api.CountTokensResponse(input_tokens=counted.count)


@router.get("/v1/models", response_model=ModelList, operation_id="listModels")
async def list_models(request: Request) -> ModelList:
    """The models this service serves, in OpenAI's shape."""
    return ModelList(data=_backend(request).models())


@router.get(
    "/v1/models/{model_id:path}",
    response_model=ModelCard,
    response_model_exclude_none=True,
    responses=_ERRORS,
    operation_id="retrieveModel",
)
async def retrieve_model(model_id: str, request: Request) -> ModelCard:
    """One served model (``client.models.retrieve``); unknown ids are a 404."""
    backend = _backend(request)
    backend.check_model(model_id)
    return next(m for m in backend.models() if m.id == model_id)


@router.post(
    "/v1/tokenize",
    response_model=TokenizeResponse,
    response_model_exclude_none=True,
    responses=_ERRORS,
    operation_id="tokenize",
)
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    """Token ids of a prompt, or of chat messages rendered through the XTML template."""
    backend = _backend(request)
    backend.check_model(body.model)
    return await backend.tokenize(body)


@router.post(
    "/v1/detokenize",
    response_model=DetokenizeResponse,
    responses=_ERRORS,
    operation_id="detokenize",
)
async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    """The text of token ids (special tokens as their marker text unless skipped)."""
    backend = _backend(request)
    backend.check_model(body.model)
    return await backend.detokenize(body)


# ----- errors: OpenAI's envelope on /v1, the shared body elsewhere ----------------------------------


MESSAGES = "/v1/messages"


def _openai_json(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    request: Request | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The error in OpenAI's envelope, or Anthropic's on ``/v1/messages``."""
    if request is not None and request.url.path.startswith(MESSAGES):
        body = messages_api.error_body(status, message)
    else:
        body = OpenAIError(status, message, param=param, code=code).body().model_dump()
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    parts, param = [], None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        if err.get("type") == "extra_forbidden":
            name = ".".join(loc) or "body"
            param = param or name
            parts.append(f"unknown field {name!r}: this server does not support it")
            continue
        # Drop pydantic's union-branch names (e.g. "str", "list[ContentPart]") from the path.
        where = ".".join(p for p in loc if not any(c in p for c in "[]()") and p != "str")
        param = param or (loc[0] if loc else None)
        parts.append(f"{where or 'body'}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(dict.fromkeys(parts)), param


def install_openai_errors(app: FastAPI) -> None:
    """Answer errors on ``/v1`` paths in OpenAI's shape; defer to the shared handlers elsewhere."""
    shared_validation = app.exception_handlers.get(RequestValidationError)
    shared_http = app.exception_handlers.get(StarletteHTTPException)
    shared_api = app.exception_handlers.get(APIError)

    async def on_openai(request: Request, exc: OpenAIError) -> JSONResponse:
        return _openai_json(
            exc.status,
            exc.message,
            param=exc.param,
            code=exc.code,
            request=request,
            headers=exc.headers,
        )

    async def on_gone(_: Request, exc: ClientGone) -> JSONResponse:
        # Nobody reads this; 499 is the customary log status for "client closed request".
        return _openai_json(499, "client closed the request")

    async def on_validation(request: Request, exc: RequestValidationError):  # type: ignore[no-untyped-def]
        if request.url.path.startswith(V1) or shared_validation is None:
            message, param = _validation_message(exc)
            return _openai_json(400, message, param=param, request=request)
        return await shared_validation(request, exc)

    async def on_http(request: Request, exc: StarletteHTTPException):  # type: ignore[no-untyped-def]
        if request.url.path.startswith(V1) or shared_http is None:
            return _openai_json(exc.status_code, str(exc.detail), request=request)
        return await shared_http(request, exc)

    async def on_api(request: Request, exc: APIError):  # type: ignore[no-untyped-def]
        if request.url.path.startswith(V1) or shared_api is None:
            return _openai_json(exc.status, exc.message, code=exc.error_code, request=request)
        return await shared_api(request, exc)

    app.add_exception_handler(OpenAIError, on_openai)  # type: ignore[arg-type]
    app.add_exception_handler(ClientGone, on_gone)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(APIError, on_api)  # type: ignore[arg-type]
