"""Wire models of the sandbox service: the request and response bodies of its HTTP API.

They live in ``shared/`` so typed clients (:mod:`shared.clients`) return them without importing
the service; the service's routes and domain use the same classes (``services/sandbox/api/
schemas.py`` re-exports them). ``services/sandbox/openapi.yaml`` is generated from them and a
drift test keeps the two equal.

Naming: where E2B has the operation, its bodies carry E2B's field names exactly (``templateID``,
``sandboxID``, ``cpuCount``, ``memoryMB``, ``startedAt``, ``endAt``, ``autoPause``...), so E2B
SDKs and tools fit; what k3stack adds — extra fields on those bodies and the k3stack-only
operations (exec, files, checkpoints, restore, runtimes) — is snake_case, the platform's
convention (``memory_checkpoint``, ``head_checkpoint_id``, ``exit_code``). Requests also accept
the snake_case names (``template``, ``cpu``, ``memory_mb``, ``timeout_s``), so the platform's own
callers need no translation.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from shared.errors import Error

__all__ = [
    "ENVD_VERSION",
    "MAX_TIMEOUT_S",
    "NEVER",
    "Checkpoint",
    "ConnectSandbox",
    "EntryInfo",
    "ExecBody",
    "ExecOutput",
    "ExecStreamEvent",
    "GCReport",
    "Lifecycle",
    "NetworkPolicy",
    "NewCheckpoint",
    "NewSandbox",
    "NewSandboxV2",
    "NewTemplate",
    "PortForward",
    "SandboxMetric",
    "RestoreRequest",
    "ResumedSandbox",
    "RuntimeInfo",
    "RuntimeName",
    "Sandbox",
    "SandboxDetail",
    "SandboxForkRequest",
    "SandboxForkResult",
    "SandboxRefreshRequest",
    "SandboxState",
    "SandboxTimeoutRequest",
    "SignalRequest",
    "Template",
    "TemplateStep",
]

ENVD_VERSION = "0.5.7"
"""Reported as ``envdVersion``: the envd feature level served (see ``services/sandbox/api/envd.py``)."""

NEVER = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
"""``endAt`` of a running sandbox without an idle timeout."""

MAX_TIMEOUT_S = 7 * 24 * 3600
"""Longest idle or command timeout any request may ask for (a week)."""

RuntimeName = Literal["auto", "microvm", "firecracker", "docker", "kubernetes", "process"]
SandboxState = Literal["creating", "running", "paused", "killed", "error"]


# --------------------------------------------------------------------------- network

_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>[0-9]{1,5})$")


class NetworkPolicy(BaseModel):
    """Guest networking. ``none`` (default): no network device at all. ``allowlist``: a
    user-mode network whose only reachable destinations are ``allow`` (``host:port``
    strings); everything else is dropped by the runtime, not by the guest."""

    mode: Literal["none", "allowlist"] = "none"
    allow: list[str] = Field(
        default_factory=list, description="host:port destinations reachable from the guest."
    )
    pinned: dict[str, str] = Field(
        default_factory=dict,
        description="Set by the service, refused in a request: each allowlist entry -> the "
        "address deployed mode's fence checked (shared.netguard.pin_allowlist), which the runtime "
        "dials instead of looking the name up again. Kept in the sandbox's row and in every "
        "checkpoint manifest, so restore, fork and resume dial the same address.",
    )

    def pin(self, addresses: dict[str, str]) -> None:
        self.pinned = dict(addresses)

    @field_validator("allow")
    @classmethod
    def _check_allow(cls, v: list[str]) -> list[str]:
        for item in v:
            m = _HOST_PORT.match(item)
            if not m or not 0 < int(m["port"]) < 65536:
                raise ValueError(f"network allow entry {item!r} is not host:port")
        return v

    @model_validator(mode="after")
    def _check_mode(self) -> NetworkPolicy:
        if self.mode == "none" and self.allow:
            raise ValueError("network.allow given but network.mode is 'none'; use 'allowlist'")
        return self


# --------------------------------------------------------------------------- sandboxes


class NewSandbox(BaseModel):
    """``POST /sandboxes``: E2B's ``NewSandbox`` plus ``runtime``. Unknown fields are ignored
    (E2B SDKs send ``secure``, ``autoResume``... which have no meaning here)."""

    model_config = ConfigDict(extra="ignore")

    templateID: str = Field(
        "busybox",
        validation_alias=AliasChoices("templateID", "template", "template_id", "image"),
        description="Template (image) to boot: `busybox`, `debian`, or a built template.",
    )
    timeout: int | None = Field(
        None,
        ge=0,
        le=MAX_TIMEOUT_S,
        validation_alias=AliasChoices("timeout", "timeout_s"),
        description="Idle timeout in seconds; every use restarts it (0 = none; default "
        "K3STACK_SANDBOX__DEFAULT_TIMEOUT_S).",
    )
    autoPause: bool | None = Field(
        None,
        validation_alias=AliasChoices("autoPause", "auto_pause"),
        description="On timeout pause (true) or kill (false); default "
        "K3STACK_SANDBOX__TIMEOUT_ACTION.",
    )
    cpuCount: int = Field(1, ge=1, le=16, validation_alias=AliasChoices("cpuCount", "cpu"))
    memoryMB: int = Field(
        256, ge=64, le=65536, validation_alias=AliasChoices("memoryMB", "memory_mb")
    )
    metadata: dict[str, str] = Field(default_factory=dict)
    envVars: dict[str, str] = Field(
        default_factory=dict, validation_alias=AliasChoices("envVars", "env_vars", "env")
    )
    network: NetworkPolicy = Field(
        default_factory=NetworkPolicy,
        description="`none` (default) or an `allowlist` of host:port destinations.",
    )
    runtime: RuntimeName | None = Field(
        None, description="Runtime for this sandbox (default K3STACK_SANDBOX__RUNTIME)."
    )

    @field_validator("network")
    @classmethod
    def _no_client_pins(cls, v: NetworkPolicy) -> NetworkPolicy:
        if v.pinned:
            raise ValueError("network.pinned is set by the service's fence, never by a request")
        return v


E2B_EGRESS_UNSUPPORTED = ("egressProxy", "rules")
"""E2B network settings no runtime here offers: refused rather than ignored."""


def e2b_network(body: dict[str, Any]) -> dict[str, Any]:
    """E2B's network settings (``allow_internet_access``, ``network.allowOut``/``denyOut``) as
    a :class:`NetworkPolicy`. E2B's default, internet allowed, gives the guest a network device
    (``allowlist``: what ``get_host`` needs on a microVM) whose egress is its ``allowOut``
    entries; ``allow_internet_access: false`` keeps the device and allows no egress. A runtime
    here opens egress per ``host:port`` only: everything else is denied, so ``denyOut`` is
    always honoured, and an ``allowOut`` entry without a port is refused."""
    net = body.get("network")
    if isinstance(net, dict) and "mode" in net:
        return net  # k3stack's own shape
    net = net if isinstance(net, dict) else {}
    for name in E2B_EGRESS_UNSUPPORTED:
        if net.get(name):
            raise ValueError(f"network.{name} is not offered here (egress is per host:port)")
    internet = body.get("allow_internet_access", body.get("allowInternetAccess"))
    allow_out = net.get("allowOut") or []
    if not isinstance(allow_out, list):
        raise ValueError("network.allowOut must be a list of host:port strings")
    for entry in allow_out:
        if not isinstance(entry, str) or not _HOST_PORT.match(entry):
            raise ValueError(
                f"network.allowOut entry {entry!r} has no port: egress here is opened per "
                "host:port (e.g. '1.1.1.1:443'); CIDRs and whole hosts are not offered"
            )
    return {"mode": "allowlist", "allow": [] if internet is False else list(allow_out)}


class NewSandboxV2(NewSandbox):
    """``POST /v2/sandboxes``, what current E2B SDKs call: :class:`NewSandbox` with E2B's
    network settings and defaults (:func:`e2b_network`); k3stack's own ``network`` (with a
    ``mode``) is taken as it is."""

    @model_validator(mode="before")
    @classmethod
    def _e2b_network(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {**data, "network": e2b_network(data)}
        return data


class Lifecycle(BaseModel):
    autoResume: bool = False
    onTimeout: Literal["pause", "kill"]


class Sandbox(BaseModel):
    """E2B's ``Sandbox``: what create, resume, connect and fork return."""

    templateID: str
    sandboxID: str
    clientID: str = Field("k3stack", deprecated=True)
    envdVersion: str = Field(
        ENVD_VERSION,
        description="The envd feature level the data plane serves (E2B SDKs compare it).",
    )
    domain: str | None = None
    envdAccessToken: str | None = Field(
        None, description="Opens this sandbox's envd data plane when auth is on (X-Access-Token)."
    )
    trafficAccessToken: str | None = Field(
        None,
        description="Opens this sandbox's guest ports through get_host when auth is on "
        "(header e2b-traffic-access-token).",
    )
    runtime: str
    state: SandboxState


class SandboxDetail(Sandbox):
    """E2B's ``SandboxDetail`` / ``ListedSandbox`` plus what k3stack adds (snake_case)."""

    startedAt: datetime
    endAt: datetime = Field(
        description="Running: when the idle timeout fires (9999-12-31T23:59:59Z: no timeout). "
        "Paused or stopped: when it stopped running. Never null (E2B SDKs parse it)."
    )
    cpuCount: int
    memoryMB: int
    diskSizeMB: int = 0
    metadata: dict[str, str]
    network: NetworkPolicy
    guest_addresses: dict[str, str] = Field(
        default_factory=dict,
        description="Allowlist networking: where the guest reaches each allowed destination "
        "(`host:port` -> `address:port` inside the guest).",
    )
    lifecycle: Lifecycle
    timeout_s: int = Field(description="Idle timeout in seconds (0 = none).")
    memory_checkpoint: bool = Field(
        description="Whether this sandbox's checkpoints, pause and fork keep memory and "
        "processes (false: files only)."
    )
    head_checkpoint_id: str | None = Field(
        None, description="Newest checkpoint of this sandbox's state; what resume restores."
    )
    forked_from: str | None = Field(None, description="Checkpoint it was forked from.")
    error: str | None = None


class ResumedSandbox(BaseModel):
    timeout: int | None = Field(
        None, ge=0, le=MAX_TIMEOUT_S, description="New idle timeout in seconds."
    )
    autoPause: bool | None = None


class ConnectSandbox(BaseModel):
    timeout: int | None = Field(
        None, ge=0, le=MAX_TIMEOUT_S, description="New idle timeout in seconds."
    )


class SandboxTimeoutRequest(BaseModel):
    timeout: int = Field(
        ge=0, le=MAX_TIMEOUT_S, description="Seconds from now until the sandbox times out."
    )


class SandboxRefreshRequest(BaseModel):
    duration: int = Field(60, ge=0, le=3600, description="Keep alive at least this long.")


class SandboxForkRequest(BaseModel):
    count: int = Field(
        1, ge=1, le=1000, description="Number of forks (at most K3STACK_SANDBOX__MAX_FORK_COUNT)."
    )
    timeout: int | None = Field(
        None,
        ge=0,
        le=MAX_TIMEOUT_S,
        description="Idle timeout of the forks (default: the source's).",
    )
    memory: bool = Field(
        True,
        description="Fork memory and processes (needs a runtime with memory checkpoints); "
        "false forks the filesystem only.",
    )


class SandboxForkResult(BaseModel):
    """One requested fork: exactly one of ``sandbox`` or ``error`` is set."""

    sandbox: Sandbox | None = None
    error: Error | None = None


# --------------------------------------------------------------------------- checkpoints


class NewCheckpoint(BaseModel):
    name: str | None = Field(None, max_length=128, description="Label for people.")


class Checkpoint(BaseModel):
    """An incremental checkpoint: a layer over ``parent_id`` holding what changed since."""

    id: str
    sandbox_id: str
    parent_id: str | None
    kind: Literal["manual", "pause", "periodic", "fork"]
    name: str | None = None
    runtime: str
    template_id: str
    memory: bool = Field(description="Holds guest memory (processes continue on restore).")
    created_at: datetime
    bytes_stored: int = Field(description="Bytes this layer added to the object store.")
    cpu_count: int
    memory_mb: int
    info: dict[str, Any] = Field(
        default_factory=dict, description="Runtime figures: pages changed, timings (ms)..."
    )


class GCReport(BaseModel):
    """What one garbage collection (mark and sweep of checkpoints and stored objects) did."""

    checkpoints_reachable: int = Field(description="Checkpoints some live sandbox still needs.")
    checkpoints_deleted: int = Field(description="Checkpoint rows only killed sandboxes had.")
    objects_scanned: int = Field(description="Objects listed under the runtimes' prefixes.")
    objects_deleted: int
    bytes_freed: int
    objects_in_grace: int = Field(description="Unreferenced objects kept: younger than the grace.")
    local_files_deleted: int = Field(description="Cached disk layers and killed workdirs removed.")
    local_bytes_freed: int
    missing_objects: list[str] = Field(
        default_factory=list,
        description="Objects reachable checkpoints reference that are not in the store (first 20).",
    )
    duration_ms: float


class RestoreRequest(BaseModel):
    checkpoint_id: str = Field(validation_alias=AliasChoices("checkpoint_id", "checkpointID"))


# --------------------------------------------------------------------------- exec and files


class ExecBody(BaseModel):
    """A command: exactly one of ``cmd`` (through ``/bin/sh -c``) or ``argv``."""

    cmd: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = Field(None, description="Working directory (default /home/user).")
    stdin: str | None = Field(None, description="Written to the process, then closed.")
    timeout_s: float = Field(
        60.0, ge=0, le=MAX_TIMEOUT_S, allow_inf_nan=False,
        validation_alias=AliasChoices("timeout_s", "timeout"),
        description="Seconds; 0 = the longest allowed (K3STACK_SANDBOX__EXEC_MAX_TIMEOUT_S, "
        "which also caps larger values: 400).",
    )  # fmt: skip
    background: bool = Field(
        False,
        description="Start and return the pid at once; output goes to "
        "/tmp/.k3s/bg-<pid>.out and .err in the guest.",
    )


class ExecOutput(BaseModel):
    exit_code: int | None = Field(description="Exit status; null when timed out or backgrounded.")
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool = Field(
        False,
        description="Output past K3STACK_SANDBOX__EXEC_MAX_OUTPUT_BYTES per stream was dropped.",
    )
    pid: int | None = None
    duration_ms: float


class ExecStreamEvent(BaseModel):
    """One NDJSON line (or SSE event) of a streamed exec: one ``start``, output chunks, one
    ``exit``; an ``error`` event (with ``data`` the message) ends the stream if the sandbox
    goes away mid-command."""

    kind: Literal["start", "stdout", "stderr", "exit", "error"]
    data: str = ""
    pid: int | None = None
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False


class EntryInfo(BaseModel):
    """A guest file or directory."""

    name: str
    path: str
    type: Literal["file", "dir", "symlink"]
    size: int
    mode: int = Field(description="Permission bits, e.g. 420 (0o644).")
    modified_time: datetime


class SandboxMetric(BaseModel):
    """E2B's ``SandboxMetric``: one sample of the sandbox's CPU, memory and root disk, read in
    the guest (``/proc/stat``, ``/proc/meminfo``, ``df /``). On the ``process`` runtime the
    guest's ``/proc`` is the host's, so CPU and memory are the host's figures."""

    timestamp: datetime
    timestampUnix: int
    cpuCount: int
    cpuUsedPct: float
    memUsed: int
    memTotal: int
    memCache: int
    diskUsed: int
    diskTotal: int


class PortForward(BaseModel):
    """Where the host reaches a guest TCP port (E2B's ``get_host``)."""

    port: int = Field(description="The guest port.")
    host: str = Field(
        description="`address:port` on the service host's loopback that forwards to the guest "
        "port; valid while the sandbox's VM runs (ask again after resume, restore or fork)."
    )


class SignalRequest(BaseModel):
    signal: int = Field(15, ge=1, le=64)


# --------------------------------------------------------------------------- templates


class TemplateStep(BaseModel):
    """E2B's ``TemplateStep``: ``RUN`` (args joined, run by /bin/sh -c) or ``ENV`` (KEY, value)."""

    type: Literal["RUN", "ENV"]
    args: list[str] = Field(default_factory=list)

    @field_validator("type", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class NewTemplate(BaseModel):
    """Build a template: ``fromTemplate`` plus ``steps`` (E2B's build request, trimmed)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$", description="Template id.")
    fromTemplate: str | None = Field(None, description="Template to build on (default busybox).")
    steps: list[TemplateStep] = Field(default_factory=list)
    cpuCount: int = Field(1, ge=1, le=16)
    memoryMB: int = Field(256, ge=64, le=65536)
    runtime: RuntimeName | None = None


class Template(BaseModel):
    templateID: str
    runtime: str = Field(description="Runtime the template is built for (`any`: built-in).")
    buildStatus: Literal["building", "ready", "error"]
    builtin: bool
    fromTemplate: str | None = None
    steps: list[TemplateStep] = Field(default_factory=list)
    cpuCount: int
    memoryMB: int
    createdAt: datetime
    updatedAt: datetime
    spawnCount: int
    logs: list[str] = Field(default_factory=list)
    error: str | None = None


class RuntimeInfo(BaseModel):
    name: str
    available: bool
    reason: str = Field(description="Why it is or is not usable on this host.")
    memory_checkpoint: bool = Field(description="Whether checkpoints include guest memory.")
    fork: bool = Field(description="Whether one checkpoint restores into many live copies.")
    network_allowlist: bool = Field(description="Whether a network allowlist is enforced.")
    default: bool = Field(description="Whether `auto` picks it on this host.")
