"""Typed HTTP clients for the five services, sync and async.

One base per flavour (:class:`ServiceClient`, :class:`AsyncServiceClient`) does the transport:
base URL and API key from settings, a timeout on every call (a call that waits on work — an exec,
a generation — gets its own: the work's limit plus :data:`WAIT_MARGIN_S`), and :class:`ServiceError`
for every non-2xx answer or failed connection, carrying the service's status, machine code and
message. Retries follow one policy (:meth:`_Base.retry_policy`, tenacity) in both flavours: only
idempotent methods (GET, HEAD, PUT, DELETE, OPTIONS), on connection errors and 502/503/504, with
exponential backoff. ``transport=`` takes any httpx transport (``httpx.MockTransport``,
``httpx.ASGITransport(app)``) so tests run a client in-process without touching its insides.

Per-service operations are written once, as methods returning the :class:`Call` they make; the
sync client runs them and returns the typed result, the async twin returns an awaitable of the
same. Results are the services' wire models (:mod:`shared.contracts`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Generic, TypeVar

import httpx
import tenacity
from pydantic import BaseModel, TypeAdapter

from shared.app import Health
from shared.auth import ALWAYS_KEYED, API_KEY_HEADER, service_key
from shared.chat import ChatMessage, ToolDefinition
from shared.contracts import model as m
from shared.contracts import sandbox as sb
from shared.contracts import tools as tl
from shared.contracts.orchestrator import Episode, EpisodeCreate, PlatformStatus
from shared.jobs import JobView
from shared.jobs_client import AsyncJobsClient, JobsClient
from shared.load import load_scaled
from shared.settings import Settings, get_settings

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_STATUSES = frozenset({502, 503, 504})
WAIT_MARGIN_S = 15.0  # HTTP timeout of a call that waits on work = the work's limit + this
T = TypeVar("T")


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _Default()  # "the client's timeout" (None means: no timeout at all)


class ServiceError(Exception):
    """A service answered with an error, or could not be reached (``status`` 0)."""

    def __init__(
        self,
        service: str,
        status: int,
        message: str,
        error_code: str = "error",
        method: str = "",
        path: str = "",
    ) -> None:
        self.service = service
        self.status = status
        self.message = message
        self.error_code = error_code
        self.method = method
        self.path = path
        where = f" ({method} {path})" if method else ""
        super().__init__(f"{service} {status} {error_code}: {message}{where}")


def _error_from_response(service: str, resp: httpx.Response) -> ServiceError:
    message, code = resp.text[:2000] or resp.reason_phrase, "error"
    try:
        body = resp.json()
        if isinstance(body, dict):
            if "message" in body:
                message = str(body["message"])
                code = str(body.get("error_code", code))
            elif "detail" in body:
                message = str(body["detail"])
            elif isinstance(body.get("error"), dict):  # OpenAI's error shape
                message = str(body["error"].get("message", message))
                code = str(body["error"].get("code") or body["error"].get("type") or code)
    except ValueError:
        pass
    return ServiceError(
        service, resp.status_code, message, code, resp.request.method, resp.request.url.path
    )


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response) -> None:
        self.response = response


@cache
def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP call and how to read its answer.

    ``result``: a type (a model, ``list[Model]``...) the JSON body is validated as; ``None`` for
    no body; ``bytes`` for the raw body; ``Any`` for the JSON as is.
    """

    method: str
    path: str
    result: Any = None
    json: Any = None
    params: dict[str, Any] | None = None
    content: bytes | None = None
    headers: dict[str, str] | None = None
    timeout: Any = DEFAULT

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self.json is not None:
            kw["json"] = self.json
        for name in ("params", "content", "headers"):
            if (value := getattr(self, name)) is not None:
                kw[name] = value
        if self.timeout is not DEFAULT:
            kw["timeout"] = self.timeout
        return kw

    def read(self, resp: httpx.Response) -> T:
        if self.result is None:
            return None  # type: ignore[return-value]
        if self.result is bytes:
            return resp.content  # type: ignore[return-value]
        if not resp.content:
            return None  # type: ignore[return-value]
        return _adapter(self.result).validate_json(resp.content)


def _body(value: BaseModel | dict[str, Any] | None) -> Any:
    return (
        value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value
    )


def waits_on(limit_s: float | None) -> float | None:
    """HTTP timeout of a call that waits up to ``limit_s`` for work (``None``/0: no limit)."""
    return None if not limit_s else float(limit_s) + WAIT_MARGIN_S


class _Base:
    service = "service"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float | None = 30.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if api_key is None and self.service in ALWAYS_KEYED:
            api_key = service_key(get_settings(), self.service)  # its admin key, every mode
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff_s = backoff_s
        self.headers = {API_KEY_HEADER: api_key} if api_key else {}
        self._transport = transport

    @classmethod
    def _settings_kwargs(cls, name: str, settings: Settings | None, **kw: Any) -> dict[str, Any]:
        settings = settings or get_settings()
        section = settings.service(name)
        out: dict[str, Any] = {
            "base_url": section.base_url,
            # a service keyed in every mode: its configured key, else the embedded one
            "api_key": service_key(settings, name) if name in ALWAYS_KEYED else section.api_key,
            "timeout": settings.http_timeout_s,
            "retries": settings.http_retries,
        }
        out.update(kw)
        return out

    @classmethod
    def for_service(cls, name: str, settings: Settings | None = None, **kw: Any) -> Any:
        client = cls(**cls._settings_kwargs(name, settings, **kw))
        client.service = name
        return client

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kw: Any) -> Any:
        """This service's client from settings (URL, key, timeout, retries); ``kw`` overrides."""
        return cls(**cls._settings_kwargs(cls.service, settings, **kw))

    def retry_policy(self, method: str) -> dict[str, Any]:
        """The one retry policy, for tenacity's ``Retrying`` and ``AsyncRetrying`` alike."""
        attempts = 1 + (self.retries if method.upper() in IDEMPOTENT else 0)
        return {
            "stop": tenacity.stop_after_attempt(attempts),
            "wait": tenacity.wait_exponential(multiplier=self.backoff_s, max=10.0),
            "retry": tenacity.retry_if_exception_type((httpx.TransportError, _RetryableStatus)),
            "reraise": True,
        }

    def _checked(self, resp: httpx.Response) -> httpx.Response:
        if resp.status_code in RETRY_STATUSES:
            raise _RetryableStatus(resp)
        if resp.status_code >= 400:
            raise _error_from_response(self.service, resp)
        return resp

    def _failure(self, method: str, path: str, exc: Exception) -> ServiceError:
        if isinstance(exc, _RetryableStatus):
            return _error_from_response(self.service, exc.response)
        if isinstance(exc, httpx.TimeoutException):
            return ServiceError(
                self.service, 0, f"no answer in time from {self.base_url}: {exc!r}", "timeout",
                method, path,
            )  # fmt: skip
        return ServiceError(
            self.service, 0, f"unreachable at {self.base_url}: {exc}", "unreachable", method, path
        )

    def _scaled_timeout(self, kw: dict[str, Any]) -> None:
        """The client's own timeout (``http_timeout_s``: an idle host's) scaled by this host's
        load now (``shared/load.py``); a call's explicit timeout is the caller's and stays."""
        if "timeout" not in kw and isinstance(self.timeout, int | float):
            kw["timeout"] = load_scaled(self.timeout)

    def _client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "base_url": self.base_url,
            "timeout": self.timeout,
            "headers": self.headers,
        }
        if self._transport is not None:
            kw["transport"] = self._transport
        return kw


class ServiceClient(_Base):
    """Synchronous client; use as a context manager or call :meth:`close`."""

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._http = httpx.Client(**self._client_kwargs())

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One call with the retry policy; a non-2xx answer raises :class:`ServiceError`."""
        self._scaled_timeout(kw)
        try:
            for attempt in tenacity.Retrying(**self.retry_policy(method)):
                with attempt:
                    return self._checked(self._http.request(method, path, **kw))
        except (httpx.TransportError, _RetryableStatus) as exc:
            raise self._failure(method, path, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    def send(self, call: Call[T]) -> T:
        return call.read(self.request(call.method, call.path, **call.kwargs()))

    def get_json(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw).json()

    def post_json(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, json=body, **kw).json()

    def get_model(self, path: str, model: type[T], **kw: Any) -> T:
        return _adapter(model).validate_python(self.get_json(path, **kw))

    def post_model(self, path: str, body: BaseModel | dict | None, model: type[T]) -> T:
        return _adapter(model).validate_python(self.post_json(path, _body(body)))

    def health(self) -> Health:
        return self.send(Call("GET", "/health", Health))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncServiceClient(_Base):
    """Asynchronous twin of :class:`ServiceClient`; ``async with`` or :meth:`aclose`."""

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._http = httpx.AsyncClient(**self._client_kwargs())

    async def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        self._scaled_timeout(kw)
        try:
            async for attempt in tenacity.AsyncRetrying(**self.retry_policy(method)):
                with attempt:
                    return self._checked(await self._http.request(method, path, **kw))
        except (httpx.TransportError, _RetryableStatus) as exc:
            raise self._failure(method, path, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    async def send(self, call: Call[T]) -> T:
        return call.read(await self.request(call.method, call.path, **call.kwargs()))

    async def get_json(self, path: str, **kw: Any) -> Any:
        return (await self.request("GET", path, **kw)).json()

    async def post_json(self, path: str, body: Any = None, **kw: Any) -> Any:
        return (await self.request("POST", path, json=body, **kw)).json()

    async def get_model(self, path: str, model: type[T], **kw: Any) -> T:
        return _adapter(model).validate_python(await self.get_json(path, **kw))

    async def post_model(self, path: str, body: BaseModel | dict | None, model: type[T]) -> T:
        return _adapter(model).validate_python(await self.post_json(path, _body(body)))

    async def health(self) -> Health:
        return await self.send(Call("GET", "/health", Health))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# --- per-service operations, written once for both flavours ----------------------------------
#
# Each method builds its Call and hands it to ``self.send``: on a sync client that returns the
# result, on an async client an awaitable of it. Annotations name the result type.


@dataclass
class _ModelDefaults:
    model: str | None = None
    generation_timeout_s: float | None = 600.0


def _messages(messages: list[ChatMessage] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        m_.model_dump(mode="json", exclude_none=True) if isinstance(m_, BaseModel) else m_
        for m_ in messages
    ]


class _ModelOps:
    """The model service: OpenAI's chat and completions plus tokenize. For agents and judges
    prefer :mod:`shared.llm` (the official ``openai`` client); this client is for the platform's
    own calls that want k3stack's fields typed."""

    service = "model"
    send: Any
    base_url: str
    defaults: _ModelDefaults

    @classmethod
    def _settings_kwargs(cls, name: str, settings: Settings | None, **kw: Any) -> dict[str, Any]:
        settings = settings or get_settings()
        kw.setdefault("model", settings.model.served_model_name)
        kw.setdefault("generation_timeout_s", settings.llm_timeout_s)
        return super()._settings_kwargs(name, settings, **kw)  # type: ignore[misc]

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        generation_timeout_s: float | None = 600.0,
        **kw: Any,
    ) -> None:
        super().__init__(base_url, **kw)  # type: ignore[call-arg]
        self.defaults = _ModelDefaults(model=model, generation_timeout_s=generation_timeout_s)

    @property
    def openai_base_url(self) -> str:
        """What to give the official ``openai`` client (``OpenAI(base_url=...)``)."""
        return self.base_url + "/v1"

    def list_models(self) -> m.ModelList:
        return self.send(Call("GET", "/v1/models", m.ModelList))

    def _generation(self, path: str, body: dict[str, Any], result: Any, timeout: Any) -> Any:
        if self.defaults.model and "model" not in body:
            body["model"] = self.defaults.model
        body["stream"] = False
        wait = self.defaults.generation_timeout_s if timeout is DEFAULT else timeout
        return self.send(Call("POST", path, result, json=body, timeout=wait))

    def chat(
        self,
        messages: list[ChatMessage] | list[dict[str, Any]],
        *,
        tools: list[ToolDefinition] | list[dict[str, Any]] | None = None,
        timeout: float | None = DEFAULT,
        **options: Any,
    ) -> m.ChatCompletion:
        """One non-streaming chat completion. ``options``: the other request fields
        (``max_tokens``, ``seed``, ``model``...; ``model`` defaults to the configured served
        model, else the service's own). Not retried (POST); timeout: the generation timeout."""
        body: dict[str, Any] = {"messages": _messages(messages), **options}
        if tools:
            body["tools"] = [_body(t) for t in tools]
        return self._generation("/v1/chat/completions", body, m.ChatCompletion, timeout)

    def complete(
        self, prompt: str | list[int], *, timeout: float | None = DEFAULT, **options: Any
    ) -> m.Completion:
        """One non-streaming raw completion; XTML markers in ``prompt`` become special tokens."""
        body = {"prompt": prompt, **options}
        return self._generation("/v1/completions", body, m.Completion, timeout)

    def tokenize(
        self,
        prompt: str | None = None,
        *,
        messages: list[ChatMessage] | list[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> m.TokenizeResult:
        """Token ids of ``prompt``, or of ``messages`` rendered through the chat template."""
        body: dict[str, Any] = (
            {"prompt": prompt} if messages is None else {"messages": _messages(messages)}
        )
        return self.send(Call("POST", "/v1/tokenize", m.TokenizeResult, json={**body, **fields}))


def _command(cmd: str | list[str]) -> dict[str, Any]:
    return {"cmd": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}


class _SandboxOps:
    """The sandbox service (E2B-shaped lifecycle, k3stack exec/files/checkpoints). Every error
    is a :class:`ServiceError` (404 unknown sandbox, 409 wrong state or runtime, 400 bad path,
    413 too large)."""

    service = "sandbox"
    send: Any

    # lifecycle
    def create(self, template: str = "busybox", **fields: Any) -> sb.Sandbox:
        """``fields``: timeout, autoPause, cpuCount, memoryMB, metadata, envVars, network, runtime."""
        body = {"templateID": template, **{k: _body(v) for k, v in fields.items()}}
        return self.send(Call("POST", "/sandboxes", sb.Sandbox, json=body))

    def get(self, sandbox_id: str) -> sb.SandboxDetail:
        return self.send(Call("GET", f"/sandboxes/{sandbox_id}", sb.SandboxDetail))

    def list(
        self, state: list[str] | None = None, metadata: str | None = None
    ) -> list[sb.SandboxDetail]:
        params: dict[str, Any] = {}
        if state:
            params["state"] = ",".join(state)
        if metadata:
            params["metadata"] = metadata
        return self.send(Call("GET", "/sandboxes", list[sb.SandboxDetail], params=params))

    def kill(self, sandbox_id: str) -> None:
        return self.send(Call("DELETE", f"/sandboxes/{sandbox_id}"))

    def pause(self, sandbox_id: str) -> None:
        return self.send(Call("POST", f"/sandboxes/{sandbox_id}/pause"))

    def resume(self, sandbox_id: str, timeout: int | None = None) -> sb.Sandbox:
        body = {"timeout": timeout}
        return self.send(Call("POST", f"/sandboxes/{sandbox_id}/resume", sb.Sandbox, json=body))

    def connect(self, sandbox_id: str, timeout: int | None = None) -> sb.Sandbox:
        body = {"timeout": timeout}
        return self.send(Call("POST", f"/sandboxes/{sandbox_id}/connect", sb.Sandbox, json=body))

    def set_timeout(self, sandbox_id: str, timeout: int) -> None:
        body = {"timeout": timeout}
        return self.send(Call("POST", f"/sandboxes/{sandbox_id}/timeout", json=body))

    def fork(
        self, sandbox_id: str, count: int = 1, memory: bool = True, timeout: int | None = None
    ) -> list[sb.SandboxForkResult]:
        """One result per fork, each with exactly one of ``sandbox`` or ``error``."""
        body = {"count": count, "memory": memory, "timeout": timeout}
        path = f"/sandboxes/{sandbox_id}/fork"
        return self.send(Call("POST", path, list[sb.SandboxForkResult], json=body))

    # checkpoints
    def checkpoint(self, sandbox_id: str, name: str | None = None) -> sb.Checkpoint:
        path = f"/sandboxes/{sandbox_id}/checkpoints"
        return self.send(Call("POST", path, sb.Checkpoint, json={"name": name}))

    def checkpoints(self, sandbox_id: str) -> list[sb.Checkpoint]:
        return self.send(Call("GET", f"/sandboxes/{sandbox_id}/checkpoints", list[sb.Checkpoint]))

    def lineage(self, checkpoint_id: str) -> list[sb.Checkpoint]:
        path = f"/checkpoints/{checkpoint_id}/lineage"
        return self.send(Call("GET", path, list[sb.Checkpoint]))

    def restore(self, sandbox_id: str, checkpoint_id: str) -> sb.SandboxDetail:
        body = {"checkpoint_id": checkpoint_id}
        path = f"/sandboxes/{sandbox_id}/restore"
        return self.send(Call("POST", path, sb.SandboxDetail, json=body))

    # exec
    def exec(
        self, sandbox_id: str, cmd: str | list[str], *, timeout: float = 60.0, **fields: Any
    ) -> sb.ExecOutput:
        """``cmd`` a string runs through /bin/sh -c, a list is an argv; ``timeout`` is the
        command's limit in seconds (0: none), and the HTTP call waits that long plus a margin.
        ``fields``: env, cwd, stdin, background."""
        body = {**_command(cmd), "timeout_s": timeout, **fields}
        path = f"/sandboxes/{sandbox_id}/exec"
        return self.send(Call("POST", path, sb.ExecOutput, json=body, timeout=waits_on(timeout)))

    # files
    def read_file(self, sandbox_id: str, path: str) -> bytes:
        params = {"path": path}
        return self.send(Call("GET", f"/sandboxes/{sandbox_id}/files", bytes, params=params))

    def write_file(
        self, sandbox_id: str, path: str, data: bytes | str, mode: int = 0o644
    ) -> sb.EntryInfo:
        content = data.encode() if isinstance(data, str) else data
        params = {"path": path, "mode": f"{mode:o}"}
        url = f"/sandboxes/{sandbox_id}/files"
        return self.send(Call("PUT", url, sb.EntryInfo, params=params, content=content))

    def list_dir(self, sandbox_id: str, path: str) -> list[sb.EntryInfo]:
        url = f"/sandboxes/{sandbox_id}/files/list"
        return self.send(Call("GET", url, list[sb.EntryInfo], params={"path": path}))

    def stat(self, sandbox_id: str, path: str) -> sb.EntryInfo:
        url = f"/sandboxes/{sandbox_id}/files/stat"
        return self.send(Call("GET", url, sb.EntryInfo, params={"path": path}))

    def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        params = {"path": path, "recursive": str(recursive).lower()}
        return self.send(Call("DELETE", f"/sandboxes/{sandbox_id}/files", params=params))

    # templates and runtimes
    def build_template(self, name: str, steps: list[dict[str, Any]], **fields: Any) -> sb.Template:
        """Start a build (202); poll :meth:`template` until ``buildStatus`` is not building."""
        body = {"name": name, "steps": steps, **fields}
        return self.send(Call("POST", "/templates", sb.Template, json=body))

    def template(self, template_id: str) -> sb.Template:
        return self.send(Call("GET", f"/templates/{template_id}", sb.Template))

    def runtimes(self) -> list[sb.RuntimeInfo]:
        return self.send(Call("GET", "/runtimes", list[sb.RuntimeInfo]))


class _ToolsOps:
    """Worlds, clock, events and checks of the tools service (API key); app calls go with the
    world token through :meth:`app` (or the apps' official SDKs pointed at :meth:`app_url`)."""

    service = "tools"
    send: Any
    base_url: str

    def create_world(self, scenario: str = "empty", seed: int = 0) -> tl.World:
        """The token is shown only here (and by :meth:`fork`)."""
        body = {"scenario": scenario, "seed": seed}
        return self.send(Call("POST", "/worlds", tl.World, json=body))

    def list_worlds(self, limit: int = 100) -> list[tl.World]:
        return self.send(Call("GET", "/worlds", list[tl.World], params={"limit": limit}))

    def get_world(self, world_id: str) -> tl.World:
        return self.send(Call("GET", f"/worlds/{world_id}", tl.World))

    def delete_world(self, world_id: str) -> None:
        return self.send(Call("DELETE", f"/worlds/{world_id}"))

    def reset(self, world_id: str) -> tl.World:
        return self.send(Call("POST", f"/worlds/{world_id}/reset", tl.World))

    def snapshot(self, world_id: str, label: str | None = None) -> tl.Snapshot:
        path = f"/worlds/{world_id}/snapshots"
        return self.send(Call("POST", path, tl.Snapshot, json={"label": label}))

    def snapshots(self, world_id: str) -> list[tl.Snapshot]:
        return self.send(Call("GET", f"/worlds/{world_id}/snapshots", list[tl.Snapshot]))

    def restore(self, world_id: str, snapshot_id: str) -> tl.World:
        body = {"snapshot_id": snapshot_id}
        return self.send(Call("POST", f"/worlds/{world_id}/restore", tl.World, json=body))

    def fork(self, world_id: str) -> tl.World:
        return self.send(Call("POST", f"/worlds/{world_id}/fork", tl.World))

    def state(self, world_id: str, tables: bool = True) -> tl.WorldState:
        params = {"tables": tables}
        return self.send(Call("GET", f"/worlds/{world_id}/state", tl.WorldState, params=params))

    def clock(self, world_id: str) -> tl.Clock:
        return self.send(Call("GET", f"/worlds/{world_id}/clock", tl.Clock))

    def advance(
        self,
        world_id: str,
        *,
        to: str | None = None,
        by: str | float | None = None,
        timeout: float | None = DEFAULT,
    ) -> tl.AdvanceResult:
        """Move the simulated clock (``to`` ISO time, or ``by`` '3h' / seconds / 'PT1H'). Events
        fire on the way and NPC replies may call a model: give a long advance its ``timeout``."""
        body = {"to": to} if to is not None else {"by": by}
        path = f"/worlds/{world_id}/clock/advance"
        return self.send(Call("POST", path, tl.AdvanceResult, json=body, timeout=timeout))

    def events(self, world_id: str) -> tl.EventList:
        return self.send(Call("GET", f"/worlds/{world_id}/events", tl.EventList))

    def checks(self, world_id: str) -> tl.ChecksReport:
        """Per-event verdicts and the model-judged checks (rubric + resolved inputs)."""
        return self.send(Call("GET", f"/worlds/{world_id}/checks", tl.ChecksReport))

    def scenarios(self) -> tl.ScenarioList:
        return self.send(Call("GET", "/scenarios", tl.ScenarioList))

    def scenario(self, name: str, seed: int = 0) -> tl.ScenarioInstance:
        params = {"seed": seed}
        return self.send(Call("GET", f"/scenarios/{name}", tl.ScenarioInstance, params=params))

    def app_url(self, world_id: str) -> str:
        """Base URL of a world's apps, e.g. the Gmail SDK's ``api_endpoint``."""
        return f"{self.base_url}/worlds/{world_id}/"

    def app(self, world_id: str, token: str, method: str, path: str, **kw: Any) -> Any:
        """Call an app route (``gmail/v1/users/me/messages`` …) with the world token; the
        JSON answer as is (the apps speak Gmail's, Slack's, Notion's own shapes)."""
        headers = {"Authorization": f"Bearer {token}", **kw.pop("headers", {})}
        call = Call(
            method.upper(), f"/worlds/{world_id}/{path.lstrip('/')}", Any, headers=headers, **kw
        )
        return self.send(call)


class _OrchestratorOps:
    service = "orchestrator"
    send: Any

    def platform(self) -> PlatformStatus:
        return self.send(Call("GET", "/platform", PlatformStatus))

    def create_episode(self, body: EpisodeCreate | dict[str, Any]) -> Episode:
        """Queue an episode; poll :meth:`episode` (POST is not retried)."""
        data = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
        return self.send(Call("POST", "/episodes", Episode, json=data))

    def episode(self, episode_id: str) -> Episode:
        return self.send(Call("GET", f"/episodes/{episode_id}", Episode))

    def cancel_episode(self, episode_id: str) -> Episode:
        return self.send(Call("POST", f"/episodes/{episode_id}/cancel", Episode))

    def episode_trajectory(self, episode_id: str) -> dict[str, Any]:
        """The versioned trajectory (``shared.trajectory.Trajectory.model_validate`` reads it)."""
        return self.get_json(f"/episodes/{episode_id}/trajectory")


class ModelClient(_ModelOps, ServiceClient):
    pass


class AsyncModelClient(_ModelOps, AsyncServiceClient):
    pass


class SandboxClient(_SandboxOps, ServiceClient):
    def exec_stream(
        self, sandbox_id: str, cmd: str | list[str], **fields: Any
    ) -> Iterator[sb.ExecStreamEvent]:
        """The events of a streamed exec as they arrive (no overall timeout; each read waits
        at most the client's timeout for the next line)."""
        path = f"/sandboxes/{sandbox_id}/exec/stream"
        with self._http.stream("POST", path, json={**_command(cmd), **fields}) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise _error_from_response(self.service, resp)
            for line in resp.iter_lines():
                if line:
                    yield sb.ExecStreamEvent.model_validate(json.loads(line))


class AsyncSandboxClient(_SandboxOps, AsyncServiceClient):
    async def exec_stream(
        self, sandbox_id: str, cmd: str | list[str], **fields: Any
    ) -> AsyncIterator[sb.ExecStreamEvent]:
        path = f"/sandboxes/{sandbox_id}/exec/stream"
        async with self._http.stream("POST", path, json={**_command(cmd), **fields}) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise _error_from_response(self.service, resp)
            async for line in resp.aiter_lines():
                if line:
                    yield sb.ExecStreamEvent.model_validate(json.loads(line))


class ToolsClient(_ToolsOps, ServiceClient):
    pass


class AsyncToolsClient(_ToolsOps, AsyncServiceClient):
    pass


# Episodes are jobs of the shared job model: ``/jobs`` serves them too (``wait_job``).
class OrchestratorClient(_OrchestratorOps, ServiceClient, JobsClient):
    pass


class _VerifierOps:
    """Verification jobs (the shared job model: ``/jobs`` routes, :mod:`shared.jobs_client`
    adds get/list/cancel/wait)."""

    service = "verifier"
    send: Any

    def create_job(self, kind: str, payload: dict[str, Any]) -> JobView:
        body = {"kind": kind, "payload": payload}
        return self.send(Call("POST", "/jobs", JobView, json=body))


# ServiceClient before the jobs mixin: its ``request`` is the real one.
class VerifierClient(_VerifierOps, ServiceClient, JobsClient):
    pass


class AsyncVerifierClient(_VerifierOps, AsyncServiceClient, AsyncJobsClient):
    pass
