"""Every k3stack setting, read from ``K3STACK_*`` environment variables in this one place.

Precedence, highest first: values passed to :func:`load_settings` (the CLI uses this), process
environment, files named after the variable in ``K3STACK_SECRETS_DIR`` (Compose secrets), the
dotenv file named by ``K3STACK_ENV_FILE`` (default ``.env`` in the working directory, if
present), then the defaults below. Per-service sections are nested models read with
a double underscore: ``K3STACK_SANDBOX__PORT=9001``. A value of the wrong type stops start-up with
:class:`SettingsError`, whose message names the variable.

``python -m shared.settings`` prints the documented table of every variable; ``make docs``
(``python -m shared.settings --write docs/configuration.md``) writes it into the configuration
page, between its settings markers.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "K3STACK_"
NESTED_DELIMITER = "__"
SERVICE_NAMES = ("model", "sandbox", "tools", "verifier", "orchestrator")
#: The CPU KDA prefill chunk (``services.model.arch.kda.CHUNK_SIZE``): hash blocks must be a
#: multiple of it so a cached prefix resumes prefill on the chunk grid of an uncached run.
KDA_PREFILL_CHUNK = 32


class SettingsError(ValueError):
    """A setting could not be read; the message names the environment variable(s)."""


class ServiceSettings(BaseModel):
    """What every service has: where it listens, where others reach it, its API key."""

    host: str = Field("127.0.0.1", description="Interface the service binds to.")
    port: int = Field(0, ge=0, le=65535, description="TCP port the service listens on.")
    url: str | None = Field(
        None,
        description="Base URL other services use to reach it (default http://127.0.0.1:<port>).",
    )
    api_key: str | None = Field(
        None,
        description="API key required in the X-API-Key (or Bearer) header when auth is enabled.",
    )
    workers: int = Field(1, ge=0, le=64, description="Celery worker processes `k3stack up` starts.")
    queue: str | None = Field(
        None, description="Celery queue of the service's tasks (default: the service's name)."
    )

    @property
    def base_url(self) -> str:
        return (self.url or f"http://127.0.0.1:{self.port}").rstrip("/")


class ModelSettings(ServiceSettings):
    port: int = Field(8000, ge=0, le=65535, description="TCP port the service listens on.")
    engine: Literal["reference", "openai", "sglang", "replay"] = Field(
        "reference", description="Engine behind the OpenAI-compatible API."
    )
    preset: str = Field("tiny", description="Model preset the reference engine serves.")
    served_model_name: str = Field("k3-tiny", description="Model id reported by /v1/models.")
    upstream_url: str | None = Field(
        None,
        description="OpenAI-compatible base URL (e.g. http://host:8000/v1) the `openai` engine "
        "forwards to; `sglang` attaches to it instead of launching; `replay` records misses "
        "from it.",
    )
    checkpoint: Path | None = Field(
        None, description="Safetensors checkpoint directory; random weights when unset."
    )
    tokenizer: Path | None = Field(
        None,
        description="Tokenizer file or directory (tiktoken.model or tokenizer.json); default: "
        "the checkpoint's own, else the BPE shipped for the tiny presets.",
    )
    device: str = Field("cpu", description="Torch device of the reference engine (cpu, cuda).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Activation / cache dtype of the reference engine."
    )
    seed: int = Field(0, description="Seed of the random weights when no checkpoint is set.")
    num_threads: int = Field(
        0, ge=0, le=256, description="Torch CPU threads of the reference engine (0 = default)."
    )
    max_num_seqs: int = Field(
        16,
        ge=1,
        le=4096,
        description="Requests decoded together (KDA state slots beside the pool).",
    )
    max_num_batched_tokens: int = Field(
        256, ge=1, description="Token budget of one engine step (decodes + prefill chunks)."
    )
    max_pool_tokens: int = Field(
        131072,
        ge=16,
        description="Latent KV cache capacity in tokens, over all requests (pool pages; each "
        "running request's KDA state takes a slot beside them, not a page).",
    )
    max_model_len: int = Field(
        0,
        ge=0,
        description="Most tokens (prompt + output) per request (0 = pool capacity: an agent "
        "scenario's system prompt and tool schemas alone can pass 8K tokens).",
    )
    default_max_tokens: int = Field(
        0, ge=0, description="max_tokens when a request gives none (0 = up to the context)."
    )
    upstream_model: str | None = Field(
        None, description="Model id sent upstream by openai/sglang (default served_model_name)."
    )
    upstream_api_key: str | None = Field(
        None,
        description="Bearer key for the upstream endpoint of the openai and sglang engines "
        "(a server the sglang engine launches is started with it too).",
    )
    replay_file: Path | None = Field(
        None, description="JSONL trajectory the `replay` engine answers from."
    )
    sglang_args: str = Field(
        "", description="Extra flags for `python -m sglang.launch_server` (shell syntax)."
    )
    sglang_port: int = Field(
        30000, ge=1, le=65535, description="Port of the SGLang server the sglang engine launches."
    )
    startup_timeout_s: float = Field(
        900.0, gt=0, description="How long the sglang engine waits for its server to be ready."
    )
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Largest request body the model API reads (413)."
    )
    max_queued_requests: int = Field(
        256,
        ge=0,
        description="Requests the reference engine queues beyond max_num_seqs before answering "
        "429 with Retry-After.",
    )
    prefix_cache: bool = Field(
        True, description="Hybrid KDA/MLA prefix cache of the reference engine (paged pool)."
    )
    page_tokens: int = Field(
        6144, ge=16, description="Tokens per physical page of the paged pool (MLA latent KV)."
    )
    hash_block_tokens: int = Field(
        512,
        ge=KDA_PREFILL_CHUNK,
        description="Prefix-hash granularity: a multiple of the KDA prefill chunk (32), and "
        "page_tokens a multiple of it.",
    )
    host_tier_bytes: int = Field(
        0, ge=0, description="Host-memory tier for evicted prefixes, in bytes (0 = off)."
    )
    checkpoint_slab_bytes: int = Field(
        0,
        ge=0,
        description="Memory for the prefix cache's KDA checkpoints, apart from the pool: slots "
        "of one request's KDA state each (not pool pages), at least one (0 = sized from the "
        "model config: one slot per hash block the pool holds, the most the cache can reach).",
    )
    response_store_items: int = Field(
        10000,
        ge=0,
        description="Responses kept for previous_response_id / retrieve (store: true), in the "
        "database; the oldest go first (0 = store nothing).",
    )
    response_store_ttl_s: float = Field(
        7 * 86400.0, gt=0, description="How long a stored response is kept, in seconds."
    )
    admission_classes: str = Field(
        "4096:256,*:128",
        description="Prompt-length classes with their own prefill budget per step while "
        "another class has prefill work, so a long prompt does not hold back short ones "
        "(empty = first come first served).",
    )

    @model_validator(mode="after")
    def _check_cache_sizes(self) -> ModelSettings:
        """Sizes under which a cache hit computes exactly what an uncached prefill does."""
        if not self.prefix_cache:
            return self
        if self.hash_block_tokens % KDA_PREFILL_CHUNK:
            raise ValueError(
                f"hash_block_tokens ({self.hash_block_tokens}) must be a multiple of the KDA "
                f"prefill chunk ({KDA_PREFILL_CHUNK}): a cached prefix must end on the chunk "
                "grid, or resuming from it would not equal an uncached prefill"
            )
        if self.page_tokens % self.hash_block_tokens:
            raise ValueError(
                f"page_tokens ({self.page_tokens}) must be a multiple of hash_block_tokens "
                f"({self.hash_block_tokens})"
            )
        return self


class SandboxSettings(ServiceSettings):
    port: int = Field(8001, ge=0, le=65535, description="TCP port the service listens on.")
    runtime: Literal["auto", "microvm", "firecracker", "docker", "kubernetes", "process"] = Field(
        "auto", description="Sandbox runtime; auto = microvm when QEMU and a kernel exist."
    )
    default_timeout_s: int = Field(
        300, ge=0, description="Sandbox idle timeout in seconds (0 = no timeout)."
    )
    timeout_action: Literal["pause", "kill"] = Field(
        "pause", description="What a timed-out sandbox does."
    )
    snapshot_interval_s: int = Field(
        0, ge=0, description="Periodic snapshot interval in seconds (0 = off)."
    )
    max_upload_bytes: int = Field(
        100 * 1024 * 1024, ge=1, description="Largest file upload accepted (bigger: 413)."
    )
    max_fork_count: int = Field(100, ge=1, le=1000, description="Most children one fork makes.")
    reaper_interval_s: float = Field(
        1.0, gt=0, description="How often timeouts, periodic snapshots and liveness are checked."
    )
    gc_interval_s: int = Field(
        600,
        ge=0,
        description="How often the reaper collects garbage: checkpoints and stored objects no "
        "live sandbox needs (0 = off; POST /gc runs it on demand).",
    )
    gc_grace_s: int = Field(
        600,
        ge=0,
        description="Garbage collection keeps unreferenced objects younger than this "
        "(protects checkpoints being written).",
    )
    on_shutdown: Literal["pause", "keep"] = Field(
        "pause",
        description="Running sandboxes when the service stops: pause (checkpoint + stop; "
        "resume brings them back) or keep running for the next start to adopt.",
    )
    shutdown_budget_s: float = Field(
        5.0, ge=0, le=600,
        description="Seconds a stopping service spends pausing running sandboxes (on_shutdown: "
        "pause; eight at a time); one not begun by then is stopped at its last checkpoint "
        "instead, so the stop ends within `k3stack down`'s grace (10 s) whatever their number.",
    )  # fmt: skip
    accel: Literal["auto", "kvm", "tcg"] = Field(
        "auto", description="microvm accelerator; auto = a boot probe decides (cached)."
    )
    boot_timeout_s: float = Field(
        90.0, gt=0, le=3600,
        description="Seconds a microVM guest has to boot on an idle host. The wait follows the "
        "machine: it is multiplied by the load average per core when that is above 1 (at most "
        "8x), and a guest that misses it is booted once more before the create fails with an "
        "error naming the budget.",
    )  # fmt: skip
    qemu_user: str = Field(
        "k3stack-vm", max_length=64,
        description="Unprivileged user each microVM's QEMU drops to (-runas, after opening its "
        "files; plus -chroot, seccomp and a cgroup per VM) when the service runs as root: a "
        "user name (scripts/setup_system.sh creates k3stack-vm; a missing one falls back to "
        "nobody) or uid:gid; empty = no uid drop or chroot (seccomp and cgroups still apply).",
    )  # fmt: skip
    warm_pool: int = Field(
        1, ge=0, le=64,
        description="QEMUs kept waiting (-incoming defer) for restores, per template (prewarmed "
        "in the background at start for the templates of warm_pool_templates) and for the "
        "latest restored checkpoint; 0 = off.",
    )  # fmt: skip
    warm_pool_templates: list[str] = Field(
        ["busybox"], max_length=16,
        description="Templates whose warm pool is prewarmed at start, on the runtime each runs "
        "on (where it has a pool), so their first restore starts no QEMU; a JSON list "
        "in the environment ([] = none).",
    )  # fmt: skip
    cache_dir: Path | None = Field(
        None,
        description="Guest kernels and images (default /var/cache/k3stack as root, "
        "else ~/.cache/k3stack); scripts/setup_sandbox.sh fills it.",
    )
    allow_process_runtime: bool = Field(
        False,
        description="Allow the `process` runtime (bubblewrap, not a security boundary) in "
        "deployed mode; local mode always allows it.",
    )
    exec_max_timeout_s: int = Field(
        3600, ge=1, le=7 * 24 * 3600,
        description="Longest a sandbox command may run; an exec timeout of 0 means this.",
    )  # fmt: skip
    exec_max_output_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, le=1 << 30,
        description="Exec output kept per stream; past it output is dropped (truncated: true).",
    )  # fmt: skip
    guest_call_limit: int = Field(
        64, ge=1, le=1024,
        description="Exec and file calls into sandboxes in flight at once; more get 429.",
    )  # fmt: skip
    guest_calls_per_sandbox: int = Field(
        16, ge=1, le=1024,
        description="Of those, most in flight on one sandbox (so one cannot starve the rest).",
    )  # fmt: skip
    guest_calls_per_key: int = Field(
        32, ge=1, le=1024,
        description="Of those, most in flight for one API key (deployed mode).",
    )  # fmt: skip
    guest_streams_limit: int = Field(
        256, ge=4, le=65536,
        description="Streamed execs (SDK commands, background ones too) and downloads open at "
        "once, a quarter of it per sandbox; they hold no guest-call slot while they run.",
    )  # fmt: skip
    guest_streams_per_key: int = Field(
        64, ge=1, le=65536,
        description="Of those streams, most open for one API key (deployed mode), so one client "
        "cannot hold them all.",
    )  # fmt: skip
    guest_reserve: int = Field(
        8, ge=0, le=1024,
        description="Last places of the global call and stream bounds kept for clients holding "
        "fewer than 2 there: a few clients filling the pools never starve another.",
    )  # fmt: skip
    host_domain: str = Field(
        "sandbox.localhost",
        min_length=1,
        pattern=r"^[A-Za-z0-9.-]+$",
        description="Domain of E2B's get_host(port): requests for <port>-<sandbox id>.<this> "
        "are forwarded to that guest port.",
    )
    process_ro_binds: list[Path] = Field(
        ["/var/cache/k3stack/agents"],
        validate_default=True,
        description="Host folders every process-runtime sandbox sees read-only at the same path "
        "(those that exist); the default is where scripts/setup_agents.sh puts the agent CLIs.",
    )
    process_guest_uid: int = Field(
        100000, ge=1, le=(1 << 31) - 2,
        description="Unprivileged host uid (and gid) that owns process-runtime sandboxes' files "
        "on disk; each sandbox runs as its own uid above it (process_guest_uids of them), which "
        "is its root inside its user namespace, never root on the host. Choose a range no host "
        "account uses.",
    )  # fmt: skip
    process_guest_uids: int = Field(
        4096, ge=1, le=1 << 20,
        description="How many host uids above process_guest_uid are handed out, one per running "
        "process-runtime sandbox (so at most this many run at once); a uid is freed when its "
        "sandbox stops.",
    )  # fmt: skip
    process_usr_dirs: list[str] = Field(
        ["bin", "sbin", "lib", "lib32", "lib64", "libx32", "libexec", "include", "share"],
        description="Folders of the host's /usr a process-runtime sandbox sees (read-only "
        "image); every other one (local, src, games, ...) is an empty folder the sandbox owns. "
        "A template installs what more it needs into its own layer.",
    )
    guest_pids_max: int = Field(
        1024, ge=16, le=1 << 22,
        description="Processes a sandbox's commands may have at once (cgroup pids.max); one "
        "command gets 64 fewer, so the next command runs whatever one runaway does.",
    )  # fmt: skip


class ToolsSettings(ServiceSettings):
    port: int = Field(8002, ge=0, le=65535, description="TCP port the service listens on.")
    npc_model_url: str | None = Field(
        None, description="OpenAI-compatible endpoint for model-driven colleagues (NPCs)."
    )
    max_body_bytes: int = Field(
        64 * 1024 * 1024, ge=1024,
        description="Largest request body the tools service reads (413); above every app's "
        "own limit (Gmail's 35 MB message, base64-encoded).",
    )  # fmt: skip
    max_json_depth: int = Field(
        64, ge=8, le=200,
        description="Deepest JSON nesting a tools request may carry (deeper: 400 naming it); "
        "the apps' real payloads (Slack blocks, Notion filters) stay under 10.",
    )  # fmt: skip


class VerifierSettings(ServiceSettings):
    port: int = Field(8003, ge=0, le=65535, description="TCP port the service listens on.")
    chromium_path: Path = Field(
        Path("/usr/bin/chromium"), description="Chromium binary the web verifier drives."
    )
    job_kinds: list[str] = Field(
        ["kernel", "web", "submission", "world", "judge"],
        description="Verification job kinds, each on its own Celery queue <queue>.<kind>.",
    )
    web_template: str = Field(
        "debian", description="Sandbox template web candidates are built and served in."
    )
    web_runtime: Literal["auto", "microvm", "process"] = Field(
        "auto",
        description="Sandbox runtime for web candidates; auto = microvm when the sandbox service has it, else process (a named fallback).",
    )
    web_create_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Bound on creating one web candidate's sandbox (its own, generous).",
    )
    web_sandbox_ttl_s: int = Field(
        900, ge=60, description="Lifetime a web candidate's sandbox is created with (the backstop)."
    )
    web_orphan_grace_s: float = Field(
        60.0,
        ge=0,
        description="After a failed create, how long its sandbox is looked for (by tag) and killed.",
    )
    kernel_workers: int = Field(
        1,
        ge=0,
        le=64,
        description="Worker processes of the kernel queue alone (0 = kernel jobs share the verifier worker).",
    )
    web_workers: int = Field(
        2,
        ge=0,
        le=64,
        description="Web jobs run at once: worker processes of the web queue alone (0 = web jobs share the verifier worker, one at a time per its concurrency).",
    )
    web_create_retries: int = Field(
        1,
        ge=0,
        le=5,
        description="Extra tries of a web candidate's sandbox create that failed for the infrastructure's sake (guest did not boot, 5xx, timeout), per runtime; then the process runtime when web_runtime is auto; then the job ends sandbox_unavailable.",
    )
    judge_model: str | None = Field(
        None,
        description="Judge model id for /judge, judged world checks and the web judge term; unset = those are refused (4xx) or skipped.",
    )
    tasks_dir: Path | None = Field(
        None,
        description="Users' own tasks: kernel/<name>/ and web/<name>/ here, beside the shipped ones; API-registered kernel tasks land here (default: <data dir>/verifier-tasks).",
    )


class OrchestratorSettings(ServiceSettings):
    port: int = Field(8004, ge=0, le=65535, description="TCP port the service listens on.")
    rollout_queue: str = Field("rollouts", description="Celery queue for rollout batches.")
    lease_s: float = Field(
        30.0,
        gt=0,
        description="An episode's job lease: its worker beats every third of it; one silent "
        "this long is re-queued (failed worker_lost after job_max_attempts starts).",
    )
    reaper_interval_s: float = Field(
        5.0, ge=0, description="How often episodes whose worker died are reaped (0 = off)."
    )
    agents_dir: Path | None = Field(
        None,
        description="Where scripts/setup_agents.sh installs the real agent CLIs (default "
        "/var/cache/k3stack/agents as root, else ~/.cache/k3stack/agents).",
    )


class Settings(BaseSettings):
    """The whole configuration. Build it with :func:`load_settings`, not directly."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED_DELIMITER,
        extra="ignore",
        validate_default=True,
    )

    mode: Literal["local", "deployed"] = Field(
        "local", description="local = embedded defaults; deployed = compose/Helm (auth on)."
    )
    data_dir: Path = Field(
        Path.home() / ".k3stack", description="Where embedded databases, objects and logs live."
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL (default sqlite:///<data_dir>/k3stack.db; "
        "postgresql+psycopg://… when deployed).",
    )
    object_store_url: str | None = Field(
        None,
        description="file://<dir> for the local backend (default <data_dir>/objects), "
        "or http(s)://host:port for an S3 server (MinIO).",
    )
    object_store_access_key: str | None = Field(None, description="S3 access key.")
    object_store_secret_key: str | None = Field(None, description="S3 secret key.")
    object_store_bucket: str = Field("k3stack", description="Bucket (S3) holding all objects.")
    object_store_region: str = Field("us-east-1", description="S3 region.")
    broker_url: str | None = Field(
        None,
        description="Celery broker (default sqla+sqlite:///<data_dir>/broker.db; "
        "redis://host:6379/0 when deployed).",
    )
    result_backend: str | None = Field(
        None,
        description="Celery result backend (default db+sqlite:///<data_dir>/results.db).",
    )
    auth_enabled: bool | None = Field(
        None, description="Require API keys (default: off in local mode, on in deployed mode)."
    )
    secrets_dir: Path | None = Field(
        None,
        description="Folder of secret files named after their variables (Compose secrets: "
        "/run/secrets); the environment wins over a file.",
    )
    public_docs: bool = Field(
        False,
        description="Serve /docs, /redoc and /openapi.json without the API key when auth is on.",
    )
    public_metrics: bool = Field(
        False,
        description="Serve /metrics without the API key when auth is on (scrape with the key "
        "as a bearer token otherwise).",
    )
    allow_insecure_no_auth: bool = Field(
        False,
        description="Let deployed mode start with K3STACK_AUTH_ENABLED=false (logged as an "
        "error at every start; never in production).",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of every service."
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="text for people, json (one object per line) for collectors."
    )
    celery_eager: bool = Field(
        False,
        description="Run Celery tasks in the calling process instead of on a worker "
        "(unit tests; never in production).",
    )
    job_heartbeat_s: float = Field(
        5.0, gt=0, description="How often a worker running a job renews the job's heartbeat."
    )
    job_lease_s: float = Field(
        60.0,
        gt=0,
        description="A running job whose heartbeat is older than this has lost its worker: "
        "it is re-queued, or failed (worker_lost) after job_max_attempts.",
    )
    job_max_attempts: int = Field(
        3, ge=1, le=100, description="Most times a job is started (worker losses included)."
    )
    job_reaper_interval_s: float = Field(
        10.0, ge=0, description="How often a service looks for jobs whose worker died (0 = off)."
    )
    http_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Default timeout of inter-service HTTP calls on an idle host; each call scales it by the host's load per core (1-minute average, 1x to 8x: shared/load.py).",
    )
    http_retries: int = Field(
        3, ge=0, le=10, description="Retries of idempotent inter-service calls."
    )
    llm_url: str | None = Field(
        None,
        description="OpenAI-compatible base URL (…/v1) the platform's judges, NPCs and agent "
        "policy call (default: the model service's /v1).",
    )
    llm_api_key: str | None = Field(
        None, description="Bearer key for llm_url (default: the model service's API key)."
    )
    llm_model: str | None = Field(
        None, description="Model id those calls ask for (default: model.served_model_name)."
    )
    llm_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Timeout of one model call (a whole generation), not http_timeout_s.",
    )

    model: ModelSettings = Field(default_factory=ModelSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    tools: ToolsSettings = Field(default_factory=ToolsSettings)
    verifier: VerifierSettings = Field(default_factory=VerifierSettings)
    orchestrator: OrchestratorSettings = Field(default_factory=OrchestratorSettings)

    _unset: frozenset[str] = PrivateAttr(default=frozenset())

    @model_validator(mode="after")
    def _fill_defaults(self) -> Settings:
        self._unset = frozenset(n for n in _STORE_URLS if getattr(self, n) is None)
        d = self.data_dir.expanduser()
        self.data_dir = d
        self.database_url = self.database_url or f"sqlite:///{d / 'k3stack.db'}"
        self.object_store_url = self.object_store_url or f"file://{d / 'objects'}"
        self.broker_url = self.broker_url or f"sqla+sqlite:///{d / 'broker.db'}"
        self.result_backend = self.result_backend or f"db+sqlite:///{d / 'results.db'}"
        if self.auth_enabled is None:
            self.auth_enabled = self.mode == "deployed"
        return self

    def service(self, name: str) -> ServiceSettings:
        """The section of one service by name."""
        if name not in SERVICE_NAMES:
            raise SettingsError(f"unknown service {name!r}; choose one of {SERVICE_NAMES}")
        return getattr(self, name)

    def service_queue(self, name: str) -> str:
        """The Celery queue a service's tasks go to (``K3STACK_<SERVICE>__QUEUE``)."""
        return self.service(name).queue or name

    def ensure_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)


# ---- deployed mode: what must be set, and set to something real, before a service starts ----

_STORE_URLS = ("database_url", "broker_url", "result_backend", "object_store_url")
MIN_SECRET_LENGTH = 16
_PLACEHOLDERS = ("change-me", "changeme", "replace-me", "example", "secret", "password")
_DEFAULT_SECRETS = {"k3stack", "minioadmin", "admin", "root", "test", "default"}
# Bits a secret must carry by its own characters' statistics (length x Shannon entropy of their
# distribution): a 16-character random hex key estimates ~54 (under 32 in none of 20,000 draws),
# `aaaaaaaaaaaaaaaa` 0, `abcdabcdabcdabcd` 8 (its unit `abcd`). An estimate from the string alone, so it catches
# the obvious only; real keys come from a generator (the Helm hook, `openssl rand -hex 24`).
MIN_SECRET_BITS = 30.0


def secret_bits(value: str) -> float:
    """Estimated entropy of ``value`` in bits: its length times its characters' Shannon entropy,
    of its shortest repeating unit when it repeats one (``abcd`` * 8 counts as ``abcd``)."""
    if not value:
        return 0.0
    period = next(p for p in range(1, len(value) + 1) if value[p:] == value[: len(value) - p])
    value = value[:period]
    counts = Counter(value)
    n = len(value)
    return -n * sum(c / n * math.log2(c / n) for c in counts.values())


def _weak_secret(value: str | None) -> str | None:
    """Why a secret is unusable in deployed mode, or None when it is fine."""
    if not value:
        return "is empty"
    low = value.lower()
    if low in _DEFAULT_SECRETS:
        return "is a default/placeholder value"
    # A placeholder word is refused with filler after it (`change-me-tools`), not a random key
    # that happens to start with one (`secret-9f8e...`): what follows the word must be random.
    for word in _PLACEHOLDERS:
        if low.startswith(word) and secret_bits(value[len(word) :]) < MIN_SECRET_BITS:
            return "is a default/placeholder value"
    if len(value) < MIN_SECRET_LENGTH:
        return f"is shorter than {MIN_SECRET_LENGTH} characters"
    if secret_bits(value) < MIN_SECRET_BITS:
        return (
            f"has too little entropy (about {abs(secret_bits(value)):.0f} bits from its characters, "
            f"{MIN_SECRET_BITS:.0f} needed; use e.g. `openssl rand -hex 24`)"
        )
    return None


def deployed_problems(settings: Settings, service: str | None = None) -> list[str]:
    """Everything that stops ``service`` (None: any service) from starting in deployed mode.

    Each problem names its variable. Local mode has none: embedded defaults are the point.
    """
    if settings.mode != "deployed":
        return []
    problems = []
    for name in _STORE_URLS:
        if name in settings._unset:
            problems.append(f"{_env_name((name,))} is not set (deployed mode never falls back "
                            "to an embedded store)")  # fmt: skip
    if str(settings.object_store_url).startswith(("http://", "https://")):
        if not settings.object_store_access_key:
            problems.append("K3STACK_OBJECT_STORE_ACCESS_KEY is empty")
        why = _weak_secret(settings.object_store_secret_key)
        if why:
            problems.append(f"K3STACK_OBJECT_STORE_SECRET_KEY {why}")
    if not settings.auth_enabled and not settings.allow_insecure_no_auth:
        problems.append("K3STACK_AUTH_ENABLED=false is refused in deployed mode (set "
                        "K3STACK_ALLOW_INSECURE_NO_AUTH=true to override, never in production)")  # fmt: skip
    for name in SERVICE_NAMES:
        key = settings.service(name).api_key
        if name != service and not key:
            continue  # another service's key: only the callers of that service carry it
        why = _weak_secret(key)
        if why and settings.auth_enabled:
            problems.append(f"{_env_name((name, 'api_key'))} {why}")
    if service in (None, "sandbox") and settings.sandbox.runtime == "process":
        if not settings.sandbox.allow_process_runtime:
            problems.append("K3STACK_SANDBOX__RUNTIME=process is refused in deployed mode (not a "
                            "security boundary; K3STACK_SANDBOX__ALLOW_PROCESS_RUNTIME=true "
                            "enables it)")  # fmt: skip
    return problems


def check_deployed(settings: Settings, service: str | None = None) -> None:
    """Raise :class:`SettingsError` listing :func:`deployed_problems`, if there are any."""
    problems = deployed_problems(settings, service)
    if problems:
        who = f"k3stack {service}" if service else "k3stack"
        raise SettingsError(
            f"{who} refuses to start in deployed mode (K3STACK_MODE=deployed):\n  "
            + "\n  ".join(problems)
        )


def _env_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    if not parts:
        return ENV_PREFIX + "*"
    head, *rest = parts
    name = ENV_PREFIX + head.upper()
    for part in rest:
        name += NESTED_DELIMITER + part.upper()
    return name


def _secret_files(overrides: dict[str, Any]) -> dict[str, Any]:
    """Settings from files named after their variables in ``$K3STACK_SECRETS_DIR`` (Compose
    ``secrets:`` mount them under /run/secrets), for variables the environment does not set."""
    folder = os.environ.get("K3STACK_SECRETS_DIR")
    if not folder or not Path(folder).is_dir():
        return overrides
    merged = dict(overrides)
    for path in sorted(Path(folder).iterdir()):
        name = path.name.upper()
        if not name.startswith(ENV_PREFIX) or name in os.environ or not path.is_file():
            continue
        head, _, sub = name.removeprefix(ENV_PREFIX).lower().partition(NESTED_DELIMITER)
        value = path.read_text().strip()
        if sub:
            section = merged.setdefault(head, {})
            if isinstance(section, dict):
                section.setdefault(sub, value)
        else:
            merged.setdefault(head, value)
    return merged


def load_settings(**overrides: Any) -> Settings:
    """Read the settings; a bad value raises :class:`SettingsError` naming its variable."""
    env_file = os.environ.get("K3STACK_ENV_FILE", ".env")
    try:
        return Settings(_env_file=env_file, **_secret_files(overrides))  # type: ignore[call-arg]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            var = _env_name(err["loc"])
            value = err.get("input")
            shown = f" (got {value!r})" if not isinstance(value, dict) else ""
            problems.append(f"{var}: {err['msg']}{shown}")
        raise SettingsError("invalid k3stack settings:\n  " + "\n  ".join(problems)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once. Tests call ``get_settings.cache_clear()``."""
    return load_settings()


def settings_table() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, for docs and ``--help``."""
    rows: list[tuple[str, str, str]] = []
    for name, field in Settings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, ServiceSettings):
            for sub, sf in ann.model_fields.items():
                rows.append(
                    (_env_name((name, sub)), _show_default(sf.default), sf.description or "")
                )
        else:
            rows.append((_env_name((name,)), _show_default(field.default), field.description or ""))
    return rows


def _show_default(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, Path) and str(value).startswith(str(Path.home())):
        return "~" + str(value)[len(str(Path.home())) :]
    return str(value)


def markdown_table() -> str:
    """The settings table as Markdown (docs/configuration.md embeds it between settings markers)."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    lines += [f"| `{var}` | `{default}` | {desc} |" for var, default, desc in settings_table()]
    return "\n".join(lines)


TABLE_MARKERS = ("<!-- settings:begin -->", "<!-- settings:end -->")
CONFIGURATION_PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def write_table(path: Path = CONFIGURATION_PAGE) -> None:
    """Replace the table between the settings markers of ``path`` (a page without both markers
    is an error, so the table is never appended to the wrong file)."""
    text = path.read_text()
    begin, end = TABLE_MARKERS
    head, found, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise SystemExit(
            f"{path}: no {begin} ... {end} markers to write the settings table between"
        )
    path.write_text(f"{head}{begin}\n{markdown_table()}\n{end}{tail}")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        write_table(Path(sys.argv[2]) if len(sys.argv) > 2 else CONFIGURATION_PAGE)
    else:
        print(markdown_table())
