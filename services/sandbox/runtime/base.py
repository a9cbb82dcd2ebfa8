"""The runtime interface: what every sandbox runtime (microvm, firecracker, process) offers.

The lifecycle manager of the sandbox service composes these primitives; a runtime never
decides policy (timeouts, periodic snapshots, which checkpoint to restore). The operations:

* ``create(sandbox_id, spec, workdir) -> VMHandle`` boots a new sandbox and returns once its
  guest agent answers. Everything the runtime keeps on the host lives under ``workdir``.
* ``exec`` / ``exec_stream`` run a command (argv, or ``cmd`` through ``/bin/sh -c``) in the
  guest; ``read_file`` / ``write_file`` / ``list_dir`` / ``stat`` / ``remove`` act on guest
  files; ``kill_process`` signals a guest process (a background exec's ``pid``).
* ``checkpoint(h, parent, store) -> CheckpointManifest`` captures the running sandbox (memory,
  device state, disks, as far as ``capabilities`` say) into ``store``, storing only what changed
  since ``parent`` (a checkpoint of the same lineage), and lets the sandbox **continue**.
* ``stop(h)`` ends the sandbox's processes (no CPU, no RSS); its workdir may stay.
  **pause = checkpoint + stop**; **resume = restore** of that checkpoint. A runtime with
  ``capabilities.freezer`` (docker) instead **freezes** the sandbox after its pause checkpoint
  (``freeze``/``thaw``: processes and memory kept) and resume thaws it; the checkpoint stays
  the fallback when the frozen sandbox is gone.
* ``restore(sandbox_id, chain, store, workdir) -> VMHandle`` starts a new running sandbox from
  the newest manifest of ``chain`` (ordered oldest .. newest, ``chain[i].parent_id ==
  chain[i-1].id``). The same chain may be restored any number of times, concurrently, into
  different ``sandbox_id`` / ``workdir``: **fork = checkpoint + N restores**; each child gets
  a private copy of memory and disks and diverges independently.
* ``destroy(h)`` stops the sandbox and deletes its workdir. Checkpoints stay in the store.

Handles and manifests are pydantic models so the service can persist them (JSON) and a
restarted service can ``is_alive`` / ``destroy`` / ``restore`` from what it stored. A handle is
only meaningful on the host that created it; a manifest is meaningful anywhere the store is.

Errors are the classes below; each names what went wrong. The service maps them to HTTP:
:class:`SandboxNotRunning` 409, :class:`UnsupportedOperation` 409, :class:`GuestPathError` 400,
:class:`GuestFileNotFound` 404, :class:`GuestFileError` 400/409, :class:`RuntimeUnavailable`
503, :class:`GuestAgentError` / :class:`CheckpointError` 500.

Guest paths: absolute POSIX paths in the guest; a relative path is taken relative to
:data:`GUEST_HOME`. A path that climbs above ``/`` with ``..`` is refused
(:func:`normalize_guest_path`, :class:`GuestPathError`) before anything reaches the guest.
"""

from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.contracts.sandbox import NetworkPolicy

if TYPE_CHECKING:
    from shared.objectstore import ObjectStore

__all__ = [
    "GUEST_HOME",
    "CheckpointError",
    "CheckpointManifest",
    "ExecEvent",
    "ExecRequest",
    "ExecResult",
    "FileInfo",
    "GuestAgentError",
    "GuestFileError",
    "GuestFileNotFound",
    "GuestFileTooLarge",
    "GuestPathError",
    "NetworkPolicy",
    "Runtime",
    "RuntimeCapabilities",
    "RuntimeUnavailable",
    "SandboxNotRunning",
    "SandboxRuntimeError",
    "SandboxSpec",
    "UnsupportedOperation",
    "VMHandle",
    "normalize_guest_path",
]

GUEST_HOME = "/home/user"
"""Working directory of execs without ``cwd`` and base of relative guest paths (E2B's)."""


# --------------------------------------------------------------------------- errors


class SandboxRuntimeError(Exception):
    """Base of every runtime error."""


class RuntimeUnavailable(SandboxRuntimeError):
    """The runtime cannot run on this host (binary, kernel or image missing); says what to do."""


class UnsupportedOperation(SandboxRuntimeError):
    """The runtime cannot do this (e.g. memory fork on ``process``); the message names it."""


class SandboxNotRunning(SandboxRuntimeError):
    """The sandbox's VM/process is gone (stopped, crashed, or never started)."""


class GuestAgentError(SandboxRuntimeError):
    """The guest agent did not answer or broke the protocol."""


class GuestPathError(SandboxRuntimeError, ValueError):
    """A guest path is malformed or escapes the guest root."""


class GuestFileError(SandboxRuntimeError):
    """A file operation failed in the guest; ``errno`` is the guest's error number."""

    def __init__(self, message: str, errno: int = 0, path: str = "") -> None:
        super().__init__(message)
        self.errno = errno
        self.path = path


class GuestFileNotFound(GuestFileError):
    """The guest path does not exist (ENOENT)."""


class GuestFileTooLarge(GuestFileError):
    """The guest file is larger than the transfer limit (EFBIG); nothing past it was read."""


class CheckpointError(SandboxRuntimeError):
    """A checkpoint or restore failed; the sandbox is left as it was before the call."""


# --------------------------------------------------------------------------- specs


class SandboxSpec(BaseModel):
    """What to boot. ``image`` names an image of the runtime's image builder
    (``busybox``: tiny, for tests; ``debian``: python3, bash, coreutils, git, curl)."""

    image: str = "busybox"
    cpu: int = Field(1, ge=1, le=16, description="Virtual CPUs.")
    memory_mb: int = Field(256, ge=64, le=65536, description="Guest RAM in MiB.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of every exec.")
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)


class RuntimeCapabilities(BaseModel):
    """What a runtime's checkpoints and forks cover; the API reports these as they are."""

    memory_checkpoint: bool = Field(description="Checkpoints include guest memory/processes.")
    fork: bool = Field(description="Restore of one checkpoint into many live copies works.")
    network_allowlist: bool = Field(description="NetworkPolicy 'allowlist' is enforced.")
    freezer: bool = Field(
        False,
        description="Pause freezes the sandbox in place (processes and memory kept, no CPU) "
        "beside its pause checkpoint, instead of checkpoint + stop.",
    )


# --------------------------------------------------------------------------- exec


class ExecRequest(BaseModel):
    """One command. Exactly one of ``argv`` (exec'd directly, PATH searched) or ``cmd``
    (run by ``/bin/sh -c``). ``env`` adds to the sandbox's env; ``cwd`` defaults to
    :data:`GUEST_HOME`; ``stdin`` is written to the process then closed.

    ``timeout_s`` bounds a foreground command: at the deadline its process group gets SIGKILL
    and the result says ``timed_out`` (0 = no limit). ``background``: start, return its
    ``pid`` at once; its stdout/stderr go to ``/tmp/.k3s/bg-<pid>.out`` / ``.err`` in the
    guest, and it keeps running across checkpoints, pause/resume and fork."""

    argv: list[str] | None = None
    cmd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    stdin: bytes | None = None
    timeout_s: float = Field(60.0, ge=0)
    background: bool = False
    max_output_bytes: int = Field(0, ge=0, description="Cap per stream (0 = none); past it "
                                  "output is dropped and the result says ``truncated``.")  # fmt: skip

    @model_validator(mode="after")
    def _one_command(self) -> ExecRequest:
        if (self.argv is None) == (self.cmd is None):
            raise ValueError("give exactly one of argv or cmd")
        if self.argv is not None and not self.argv:
            raise ValueError("argv must not be empty")
        return self

    @field_validator("stdin", mode="before")
    @classmethod
    def _stdin_bytes(cls, v: Any) -> Any:
        return v.encode() if isinstance(v, str) else v

    def full_argv(self) -> list[str]:
        """The argv the guest runs."""
        return list(self.argv) if self.argv is not None else ["/bin/sh", "-c", self.cmd or ""]


class ExecResult(BaseModel):
    """Outcome of a foreground exec (``exit_code`` set, or ``timed_out``), or of a background
    start (``pid`` set, ``exit_code`` None). A process killed by signal N exits ``128 + N``.
    Output is UTF-8 decoded with replacement characters for invalid bytes."""

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False
    pid: int | None = None
    duration_ms: float = 0.0


class ExecEvent(BaseModel):
    """One event of a streamed exec, in order: one ``start`` (with ``pid``), any number of
    ``stdout`` / ``stderr`` chunks (``data``), one ``exit`` (``exit_code``, ``timed_out``)."""

    kind: Literal["start", "stdout", "stderr", "exit"]
    data: str = ""
    pid: int | None = None
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False


def gather_exec(events: Iterable[ExecEvent]) -> ExecResult:
    """A foreground exec's result from its streamed events (what ``exec`` answers)."""
    out: dict[str, list[str]] = {"stdout": [], "stderr": []}
    result = ExecResult()
    for ev in events:
        if ev.kind in out:
            out[ev.kind].append(ev.data)
        elif ev.kind == "start":
            result.pid = ev.pid
        else:
            result.exit_code, result.timed_out = ev.exit_code, ev.timed_out
            result.truncated = ev.truncated
    result.stdout, result.stderr = "".join(out["stdout"]), "".join(out["stderr"])
    return result


class FileInfo(BaseModel):
    """A guest file or directory. ``mode`` holds the permission bits (``0o644``); ``mtime``
    is seconds since the epoch in the guest's clock."""

    path: str
    name: str
    size: int
    mode: int
    is_dir: bool
    is_symlink: bool = False
    mtime: float


# --------------------------------------------------------------------------- state


class VMHandle(BaseModel):
    """A runtime's handle on one live sandbox. Opaque to the service except for the common
    fields; ``data`` carries the runtime's own (sockets, generation, memory file...). Persist
    it with ``model_dump_json()``, load it with ``VMHandle.model_validate_json``."""

    model_config = ConfigDict(extra="forbid")

    sandbox_id: str
    runtime: str
    workdir: Path
    spec: SandboxSpec
    pid: int | None = Field(None, description="Host pid of the VMM/init process, if any.")
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    restored_from: str | None = Field(None, description="Checkpoint id this VM started from.")
    data: dict[str, Any] = Field(default_factory=dict)


class CheckpointManifest(BaseModel):
    """One checkpoint layer. Stored by the runtime in the object store (and by the service in
    SQL); everything a restore needs is reachable from it and its ancestors.

    Memory is described page by page: ``page_map_key`` names an object mapping every guest page
    to its content (zero, or a content-addressed stored page), so a restore needs only the
    newest manifest's map; ``changed_pages`` / ``stored_bytes`` say what this layer added
    over ``parent_id``. ``stats`` times each phase in milliseconds (``pause_ms``,
    ``device_state_ms``, ``hash_ms``, ``store_ms``, ``total_ms``, ``downtime_ms``...)."""

    id: str
    parent_id: str | None = None
    sandbox_id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    runtime: str
    spec: SandboxSpec
    memory_bytes: int = Field(0, description="Guest RAM size.")
    page_size: int = 4096
    total_pages: int = 0
    nonzero_pages: int = Field(0, description="Pages of guest RAM that are not all zero.")
    changed_pages: int = Field(0, description="Pages that differ from the parent checkpoint.")
    new_pages: int = Field(0, description="Changed pages whose content was not yet stored.")
    stored_bytes: int = Field(0, description="Bytes this layer added to the store.")
    device_state_key: str | None = None
    page_map_key: str | None = None
    disk_keys: dict[str, str] = Field(
        default_factory=dict, description="Disk name -> object key of this layer's disk delta."
    )
    runtime_data: dict[str, Any] = Field(
        default_factory=dict, description="Runtime-specific restore data (e.g. VMM config)."
    )
    stats: dict[str, float] = Field(default_factory=dict)


# --------------------------------------------------------------------------- paths


def normalize_guest_path(path: str, base: str = GUEST_HOME) -> str:
    """Absolute, normalised guest path for ``path`` (relative paths are under ``base``).

    Raises:
        GuestPathError: empty path, NUL byte, or ``..`` climbing above ``/``.
    """
    if not isinstance(path, str) or not path:
        raise GuestPathError("guest path must be a non-empty string")
    if "\x00" in path:
        raise GuestPathError(f"guest path {path!r} contains a NUL byte")
    full = path if path.startswith("/") else f"{base.rstrip('/')}/{path}"
    depth = 0
    for part in full.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            depth -= 1
            if depth < 0:
                raise GuestPathError(f"guest path {path!r} escapes the guest root")
        else:
            depth += 1
    return posixpath.normpath(full) if full != "/" else "/"


# --------------------------------------------------------------------------- runtime


class Runtime(ABC):
    """A way to run sandboxes. Instances are thread-safe: the service calls them from many
    request threads at once, on different handles and on the same handle (e.g. an exec while
    a file is read); a runtime serialises what it must internally."""

    name: str
    capabilities: RuntimeCapabilities

    @abstractmethod
    def available(self) -> tuple[bool, str]:
        """Whether this host can run the runtime, and why (or what to install)."""

    # -- lifecycle

    @abstractmethod
    def create(self, sandbox_id: str, spec: SandboxSpec, workdir: Path) -> VMHandle:
        """Boot a sandbox; returns when its agent answers. ``workdir`` is created if missing.

        Raises:
            RuntimeUnavailable: missing binary / kernel / image (message says how to fix).
        """

    @abstractmethod
    def checkpoint(
        self, h: VMHandle, parent: CheckpointManifest | None, store: ObjectStore
    ) -> CheckpointManifest:
        """Capture the sandbox into ``store`` as a layer over ``parent`` (None = full) and let
        it continue running. The caller persists the returned manifest.

        Raises:
            SandboxNotRunning, CheckpointError.
        """

    @abstractmethod
    def stop(self, h: VMHandle) -> None:
        """End the sandbox's processes (0 CPU, 0 RSS). Idempotent. Pause = checkpoint + stop."""

    @abstractmethod
    def restore(
        self,
        sandbox_id: str,
        chain: list[CheckpointManifest],
        store: ObjectStore,
        workdir: Path,
    ) -> VMHandle:
        """Start a new running sandbox from ``chain[-1]`` (chain ordered oldest .. newest).

        Safe to call many times on one chain (fork); each call gets private memory/disks.

        Raises:
            UnsupportedOperation: the runtime cannot restore memory (``process`` restores
                files only, and says so in ``capabilities``).
            CheckpointError: a layer is missing or does not match.
        """

    @abstractmethod
    def destroy(self, h: VMHandle) -> None:
        """Stop the sandbox and delete its workdir. Idempotent."""

    @abstractmethod
    def is_alive(self, h: VMHandle) -> bool:
        """Whether the sandbox's VM/process is running (cheap; no guest round trip)."""

    def broken_reason(self, h: VMHandle) -> str | None:
        """Why the host cut this sandbox's guest off (it broke the control protocol, e.g. lied
        about a frame's size), ``None`` while it behaves. The reaper stops a broken sandbox
        and keeps the reason on its row."""
        return None

    def freeze(self, h: VMHandle) -> None:
        """Stop every process of the sandbox in place, memory kept (``capabilities.freezer``)."""
        raise UnsupportedOperation(f"runtime {self.name!r} cannot freeze a sandbox")

    def thaw(self, h: VMHandle) -> None:
        """Let a frozen sandbox run on (after a service restart too); SandboxNotRunning if it
        is gone."""
        raise UnsupportedOperation(f"runtime {self.name!r} cannot freeze a sandbox")

    def is_frozen(self, h: VMHandle) -> bool:
        """Whether the sandbox is there and frozen (a restart re-attaches it as paused)."""
        return False

    def adopt(self, h: VMHandle) -> bool:
        """Take over a sandbox a previous service process started (after a crash or a
        ``keep`` shutdown): reconnect to its VM and agent so every operation works again.
        False when it cannot be taken over; the caller then stops it (so nothing
        is left running or mapped) and recovers it from its last checkpoint. Default: the
        handle alone is enough when the VM is alive."""
        return self.is_alive(h)

    def reap_orphans(self, keep: list[VMHandle], checkpoints: set[str]) -> dict[str, int]:
        """At start, after re-attaching what it could: end every VM, process, container and
        host file a previous run of *this* instance left (owned by its label, tag or folder)
        that is not one of ``keep`` (the handles re-attached, running or frozen). Another
        instance's resources are never touched. ``checkpoints``: ids a sandbox may still
        restore (their host-side bodies stay). Returns counts of what was removed."""
        return {}

    # -- commands

    @abstractmethod
    def exec(self, h: VMHandle, req: ExecRequest) -> ExecResult:
        """Run a command to completion (or start it in the background)."""

    @abstractmethod
    def exec_stream(self, h: VMHandle, req: ExecRequest) -> Iterator[ExecEvent]:
        """Run a command, yielding its output as it comes (see :class:`ExecEvent`)."""

    @abstractmethod
    def kill_process(self, h: VMHandle, pid: int, signal: int = 15) -> None:
        """Send ``signal`` to guest process ``pid`` (and its process group)."""

    # -- files

    @abstractmethod
    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        """Contents of a guest file; with ``limit``, :class:`GuestFileTooLarge` once more than
        ``limit`` bytes would be read (never reading much past it: files like ``/dev/zero``
        end). Raises GuestFileNotFound / GuestFileError."""

    def read_file_stream(self, h: VMHandle, path: str, limit: int | None = None) -> Iterator[bytes]:
        """:meth:`read_file` in chunks as they come (constant memory however large the file);
        :class:`GuestFileTooLarge` is raised mid-way once ``limit`` would be passed. Default:
        one chunk, read whole."""
        yield self.read_file(h, path, limit)

    @abstractmethod
    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        """Create or replace a guest file (parent directories are created)."""

    def write_file_stream(
        self, h: VMHandle, path: str, chunks: Iterable[bytes], mode: int = 0o644
    ) -> FileInfo:
        """:meth:`write_file` from chunks as they arrive (default: joined, then written)."""
        return self.write_file(h, path, b"".join(chunks), mode)

    @abstractmethod
    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        """Entries of a guest directory, sorted by name (no ``.``/``..``)."""

    @abstractmethod
    def stat(self, h: VMHandle, path: str) -> FileInfo:
        """Metadata of a guest path (symlinks not followed)."""

    @abstractmethod
    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        """Delete a guest file, or a directory (non-empty only with ``recursive``)."""

    # -- optional

    def make_dir(self, h: VMHandle, path: str) -> FileInfo:
        """Create a guest directory and its parents (default: through ``exec``)."""
        p = normalize_guest_path(path)
        res = self.exec(h, ExecRequest(argv=["mkdir", "-p", p], timeout_s=30))
        if res.exit_code != 0:
            raise GuestFileError(f"mkdir {p}: {res.stderr.strip()}", path=p)
        return self.stat(h, p)

    def expose_port(self, h: VMHandle, port: int) -> str:
        """``host:port`` on the host's loopback that forwards TCP to guest ``port`` (E2B's
        ``get_host``). Idempotent per (sandbox, port); the forward lives as long as the VM
        process (ask again after a resume, restore or fork). A guest server must listen on
        ``0.0.0.0`` (microvm: the guest's NIC address is not its loopback).

        Raises:
            UnsupportedOperation: the runtime or this sandbox's network cannot forward ports.
        """
        raise UnsupportedOperation(f"runtime {self.name!r} cannot expose guest ports")

    # -- garbage collection (the manager's mark and sweep, see ``SandboxManager.collect_garbage``)

    object_prefixes: tuple[str, ...] = ()
    """Object store prefixes this runtime writes checkpoint bodies under; the GC deletes
    objects there that no reachable manifest references."""

    def referenced_keys(self, m: CheckpointManifest, store: Any) -> set[str]:
        """Every object key a restore of ``m`` (or a checkpoint over it) reads.

        Raises ``KeyError`` when an object it must read to know is gone."""
        keys = {k for k in (m.device_state_key, m.page_map_key) if k}
        keys.update(m.disk_keys.values())
        return keys

    def forget_objects(self, keys: set[str]) -> None:  # noqa: B027 - optional hook
        """The GC deleted ``keys``: drop in-memory indexes that could still point at them
        (dedup must never reuse a deleted object)."""

    def collect_local(self, referenced: set[str], grace_s: float) -> tuple[int, int]:
        """Remove local caches of store objects not in ``referenced`` and older than
        ``grace_s``; returns (files, bytes) removed."""
        return 0, 0

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release host resources of the runtime object (pools, threads). Sandboxes stay."""
