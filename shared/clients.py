"""Typed HTTP clients for the five services, sync and async.

One base per flavour (:class:`ServiceClient`, :class:`AsyncServiceClient`) does the transport:
base URL and API key from settings, a timeout on every call, retries with exponential backoff
only for idempotent methods (GET, HEAD, PUT, DELETE, OPTIONS) on connection errors and 502/503/504,
and :class:`ServiceError` for every non-2xx answer, carrying the service's status, machine code
and message. Per-service subclasses add typed methods; each service's issue extends its own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from shared.auth import API_KEY_HEADER
from shared.settings import Settings, get_settings

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_STATUSES = frozenset({502, 503, 504})
T = TypeVar("T", bound=BaseModel)


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


def _headers(api_key: str | None) -> dict[str, str]:
    return {API_KEY_HEADER: api_key} if api_key else {}


class _Base:
    service = "service"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.2,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff_s = backoff_s

    @classmethod
    def _settings_kwargs(cls, name: str, settings: Settings | None, **kw: Any) -> dict[str, Any]:
        settings = settings or get_settings()
        section = settings.service(name)
        out: dict[str, Any] = {
            "base_url": section.base_url,
            "api_key": section.api_key,
            "timeout": settings.http_timeout_s,
            "retries": settings.http_retries,
        }
        out.update(kw)
        return out

    def _should_retry(self, method: str, attempt: int, status: int | None) -> bool:
        if method.upper() not in IDEMPOTENT or attempt >= self.retries:
            return False
        return status is None or status in RETRY_STATUSES

    def _delay(self, attempt: int) -> float:
        return self.backoff_s * (2**attempt)


class ServiceClient(_Base):
    """Synchronous client; use as a context manager or call :meth:`close`."""

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._http = httpx.Client(
            base_url=self.base_url, timeout=self.timeout, headers=_headers(self.api_key)
        )

    @classmethod
    def for_service(cls, name: str, settings: Settings | None = None, **kw: Any) -> ServiceClient:
        client = cls(**cls._settings_kwargs(name, settings, **kw))
        client.service = name
        return client

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if self._should_retry(method, attempt, None):
                    time.sleep(self._delay(attempt))
                    attempt += 1
                    continue
                raise ServiceError(
                    self.service,
                    0,
                    f"unreachable at {self.base_url}: {exc}",
                    "unreachable",
                    method,
                    path,
                ) from exc
            if resp.status_code >= 400:
                if self._should_retry(method, attempt, resp.status_code):
                    time.sleep(self._delay(attempt))
                    attempt += 1
                    continue
                raise _error_from_response(self.service, resp)
            return resp

    def get_json(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw).json()

    def post_json(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, json=body, **kw).json()

    def get_model(self, path: str, model: type[T], **kw: Any) -> T:
        return model.model_validate(self.get_json(path, **kw))

    def post_model(self, path: str, body: BaseModel | dict | None, model: type[T]) -> T:
        payload = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
        return model.model_validate(self.post_json(path, payload))

    def health(self) -> dict[str, Any]:
        return self.get_json("/health")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncServiceClient(_Base):
    """Asynchronous twin of :class:`ServiceClient`; ``async with`` or :meth:`aclose`."""

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=self.timeout, headers=_headers(self.api_key)
        )

    @classmethod
    def for_service(
        cls, name: str, settings: Settings | None = None, **kw: Any
    ) -> AsyncServiceClient:
        client = cls(**cls._settings_kwargs(name, settings, **kw))
        client.service = name
        return client

    async def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = await self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if self._should_retry(method, attempt, None):
                    await asyncio.sleep(self._delay(attempt))
                    attempt += 1
                    continue
                raise ServiceError(
                    self.service,
                    0,
                    f"unreachable at {self.base_url}: {exc}",
                    "unreachable",
                    method,
                    path,
                ) from exc
            if resp.status_code >= 400:
                if self._should_retry(method, attempt, resp.status_code):
                    await asyncio.sleep(self._delay(attempt))
                    attempt += 1
                    continue
                raise _error_from_response(self.service, resp)
            return resp

    async def get_json(self, path: str, **kw: Any) -> Any:
        return (await self.request("GET", path, **kw)).json()

    async def post_json(self, path: str, body: Any = None, **kw: Any) -> Any:
        return (await self.request("POST", path, json=body, **kw)).json()

    async def get_model(self, path: str, model: type[T], **kw: Any) -> T:
        return model.model_validate(await self.get_json(path, **kw))

    async def post_model(self, path: str, body: BaseModel | dict | None, model: type[T]) -> T:
        payload = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
        return model.model_validate(await self.post_json(path, payload))

    async def health(self) -> dict[str, Any]:
        return await self.get_json("/health")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncServiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# --- per-service clients: typed methods for each service's API -------------------------------


class VerifierClient(ServiceClient):
    service = "verifier"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kw: Any) -> VerifierClient:
        return cls(**cls._settings_kwargs("verifier", settings, **kw))

    def create_job(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self.post_json("/jobs", {"kind": kind, "payload": payload})

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self.get_json(f"/jobs/{job_id}")

    def wait_job(self, job_id: str, timeout_s: float = 60.0, poll_s: float = 0.1) -> dict[str, Any]:
        """Poll until the job succeeds or fails; raises TimeoutError past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get_job(job_id)
            if job["status"] in ("succeeded", "failed"):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"verifier job {job_id} still {job['status']} after {timeout_s}s"
                )
            time.sleep(poll_s)


class ModelClient(ServiceClient):
    service = "model"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kw: Any) -> ModelClient:
        return cls(**cls._settings_kwargs("model", settings, **kw))

    def list_models(self) -> list[str]:
        return [m["id"] for m in self.get_json("/v1/models")["data"]]

    @property
    def openai_base_url(self) -> str:
        """What to give the official ``openai`` client (``OpenAI(base_url=...)``)."""
        return self.base_url + "/v1"

    def chat(self, messages: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
        """One non-streaming chat completion (OpenAI body and answer, as dicts).

        ``options`` are the other request fields (``tools``, ``max_tokens``, ``seed``...);
        ``model`` defaults to the first model the service lists. POST is not retried.
        """
        body = {"messages": messages, **options}
        body.setdefault("model", self.list_models()[0])
        body["stream"] = False
        return self.post_json("/v1/chat/completions", body)

    def complete(self, prompt: str | list[int], **options: Any) -> dict[str, Any]:
        """One non-streaming raw completion; XTML markers in ``prompt`` become special tokens."""
        body = {"prompt": prompt, **options}
        body.setdefault("model", self.list_models()[0])
        body["stream"] = False
        return self.post_json("/v1/completions", body)

    def tokenize(
        self, prompt: str | None = None, *, messages: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """Token ids of ``prompt``, or of ``messages`` rendered through the chat template."""
        body: dict[str, Any] = {"prompt": prompt} if messages is None else {"messages": messages}
        return self.post_json("/v1/tokenize", body)["tokens"]


class SandboxClient(ServiceClient):
    """The sandbox service's API (E2B-shaped lifecycle, k3stack exec/files/checkpoints).

    Methods return the service's JSON bodies as dicts; every error is a :class:`ServiceError`
    (404 unknown sandbox, 409 wrong state or runtime, 400 bad path, 413 too large).
    """

    service = "sandbox"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kw: Any) -> SandboxClient:
        return cls(**cls._settings_kwargs("sandbox", settings, **kw))

    # lifecycle
    def create(self, template: str = "busybox", **fields: Any) -> dict[str, Any]:
        """``fields``: timeout, autoPause, cpuCount, memoryMB, metadata, envVars, network, runtime."""
        return self.post_json("/sandboxes", {"templateID": template, **fields})

    def get(self, sandbox_id: str) -> dict[str, Any]:
        return self.get_json(f"/sandboxes/{sandbox_id}")

    def list(self, state: list[str] | None = None, metadata: str | None = None) -> list[dict]:
        params: dict[str, Any] = {}
        if state:
            params["state"] = ",".join(state)
        if metadata:
            params["metadata"] = metadata
        return self.get_json("/sandboxes", params=params)

    def kill(self, sandbox_id: str) -> None:
        self.request("DELETE", f"/sandboxes/{sandbox_id}")

    def pause(self, sandbox_id: str) -> None:
        self.request("POST", f"/sandboxes/{sandbox_id}/pause")

    def resume(self, sandbox_id: str, timeout: int | None = None) -> dict[str, Any]:
        return self.post_json(f"/sandboxes/{sandbox_id}/resume", {"timeout": timeout})

    def connect(self, sandbox_id: str, timeout: int | None = None) -> dict[str, Any]:
        return self.post_json(f"/sandboxes/{sandbox_id}/connect", {"timeout": timeout})

    def set_timeout(self, sandbox_id: str, timeout: int) -> None:
        self.request("POST", f"/sandboxes/{sandbox_id}/timeout", json={"timeout": timeout})

    def fork(
        self, sandbox_id: str, count: int = 1, memory: bool = True, timeout: int | None = None
    ) -> list[dict[str, Any]]:
        """One result per fork, each with exactly one of ``sandbox`` or ``error``."""
        body = {"count": count, "memory": memory, "timeout": timeout}
        return self.post_json(f"/sandboxes/{sandbox_id}/fork", body)

    # checkpoints
    def checkpoint(self, sandbox_id: str, name: str | None = None) -> dict[str, Any]:
        return self.post_json(f"/sandboxes/{sandbox_id}/checkpoints", {"name": name})

    def checkpoints(self, sandbox_id: str) -> list[dict[str, Any]]:
        return self.get_json(f"/sandboxes/{sandbox_id}/checkpoints")

    def lineage(self, checkpoint_id: str) -> list[dict[str, Any]]:
        return self.get_json(f"/checkpoints/{checkpoint_id}/lineage")

    def restore(self, sandbox_id: str, checkpoint_id: str) -> dict[str, Any]:
        return self.post_json(f"/sandboxes/{sandbox_id}/restore", {"checkpoint_id": checkpoint_id})

    # exec
    def exec(
        self, sandbox_id: str, cmd: str | list[str], *, timeout: float = 60.0, **fields: Any
    ) -> dict[str, Any]:
        """``cmd`` a string runs through /bin/sh -c, a list is an argv. ``fields``: env, cwd,
        stdin, background. Returns exit_code, stdout, stderr, timed_out, pid, duration_ms."""
        body = {"cmd": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}
        return self.post_json(
            f"/sandboxes/{sandbox_id}/exec", {**body, "timeout_s": timeout, **fields}
        )

    def exec_stream(self, sandbox_id: str, cmd: str | list[str], **fields: Any) -> Any:
        """Yield the events (dicts) of a streamed exec as they arrive."""
        import json as _json

        body = {"cmd": cmd} if isinstance(cmd, str) else {"argv": list(cmd)}
        with self._http.stream(
            "POST", f"/sandboxes/{sandbox_id}/exec/stream", json={**body, **fields}
        ) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise _error_from_response(self.service, resp)
            for line in resp.iter_lines():
                if line:
                    yield _json.loads(line)

    # files
    def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self.request("GET", f"/sandboxes/{sandbox_id}/files", params={"path": path}).content

    def write_file(
        self, sandbox_id: str, path: str, data: bytes | str, mode: int = 0o644
    ) -> dict[str, Any]:
        content = data.encode() if isinstance(data, str) else data
        return self.request(
            "PUT", f"/sandboxes/{sandbox_id}/files",
            params={"path": path, "mode": f"{mode:o}"}, content=content,
        ).json()  # fmt: skip

    def list_dir(self, sandbox_id: str, path: str) -> list[dict[str, Any]]:
        return self.get_json(f"/sandboxes/{sandbox_id}/files/list", params={"path": path})

    def stat(self, sandbox_id: str, path: str) -> dict[str, Any]:
        return self.get_json(f"/sandboxes/{sandbox_id}/files/stat", params={"path": path})

    def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        self.request(
            "DELETE", f"/sandboxes/{sandbox_id}/files",
            params={"path": path, "recursive": str(recursive).lower()},
        )  # fmt: skip

    # templates and runtimes
    def build_template(self, name: str, steps: list[dict[str, Any]], **fields: Any) -> dict:
        return self.post_json("/templates", {"name": name, "steps": steps, **fields})

    def template(self, template_id: str) -> dict[str, Any]:
        return self.get_json(f"/templates/{template_id}")

    def runtimes(self) -> list[dict[str, Any]]:
        return self.get_json("/runtimes")


class ToolsClient(ServiceClient):
    """Worlds, clock, events and checks of the tools service (API key); app calls go with the
    world token through :meth:`app` (or the apps' official SDKs pointed at :meth:`app_url`)."""

    service = "tools"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kw: Any) -> ToolsClient:
        return cls(**cls._settings_kwargs("tools", settings, **kw))

    def create_world(self, scenario: str = "empty", seed: int = 0) -> dict[str, Any]:
        """``{"id", "token", "clock", …}``; the token is shown only here (and by :meth:`fork`)."""
        return self.post_json("/worlds", {"scenario": scenario, "seed": seed})

    def get_world(self, world_id: str) -> dict[str, Any]:
        return self.get_json(f"/worlds/{world_id}")

    def delete_world(self, world_id: str) -> None:
        self.request("DELETE", f"/worlds/{world_id}")

    def reset(self, world_id: str) -> dict[str, Any]:
        return self.post_json(f"/worlds/{world_id}/reset")

    def snapshot(self, world_id: str, label: str | None = None) -> dict[str, Any]:
        return self.post_json(f"/worlds/{world_id}/snapshots", {"label": label})

    def restore(self, world_id: str, snapshot_id: str) -> dict[str, Any]:
        return self.post_json(f"/worlds/{world_id}/restore", {"snapshot_id": snapshot_id})

    def fork(self, world_id: str) -> dict[str, Any]:
        return self.post_json(f"/worlds/{world_id}/fork")

    def state(self, world_id: str, tables: bool = True) -> dict[str, Any]:
        return self.get_json(f"/worlds/{world_id}/state", params={"tables": tables})

    def clock(self, world_id: str) -> str:
        return self.get_json(f"/worlds/{world_id}/clock")["now"]

    def advance(
        self, world_id: str, *, to: str | None = None, by: str | float | None = None
    ) -> dict[str, Any]:
        """Move the simulated clock (``to`` ISO time, or ``by`` '3h' / seconds / 'PT1H')."""
        body = {"to": to} if to is not None else {"by": by}
        return self.post_json(f"/worlds/{world_id}/clock/advance", body)

    def events(self, world_id: str) -> list[dict[str, Any]]:
        return self.get_json(f"/worlds/{world_id}/events")["events"]

    def checks(self, world_id: str) -> dict[str, Any]:
        """Per-event verdicts and the model-judged checks (rubric + resolved inputs)."""
        return self.get_json(f"/worlds/{world_id}/checks")

    def scenarios(self) -> list[dict[str, Any]]:
        return self.get_json("/scenarios")["scenarios"]

    def app_url(self, world_id: str) -> str:
        """Base URL of a world's apps, e.g. the Gmail SDK's ``api_endpoint``."""
        return f"{self.base_url}/worlds/{world_id}/"

    def app(self, world_id: str, token: str, method: str, path: str, **kw: Any) -> Any:
        """Call an app route (``gmail/v1/users/me/messages`` …) with the world token."""
        headers = {"Authorization": f"Bearer {token}", **kw.pop("headers", {})}
        resp = self._http.request(
            method, f"/worlds/{world_id}/{path.lstrip('/')}", headers=headers, **kw
        )
        if resp.status_code >= 400:
            raise _error_from_response(self.service, resp)
        return resp.json() if resp.content else None


class OrchestratorClient(ServiceClient):
    service = "orchestrator"

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kw: Any) -> OrchestratorClient:
        return cls(**cls._settings_kwargs("orchestrator", settings, **kw))

    def platform(self) -> dict[str, Any]:
        return self.get_json("/platform")
