"""The ``sglang`` backend: serve real Kimi K3 / Kimi Linear weights through SGLang.

Attach mode (``K3STACK_MODEL__UPSTREAM_URL`` set): forward to that running SGLang server with
every upstream setting (``UPSTREAM_MODEL``, ``UPSTREAM_API_KEY``), as the ``openai`` engine does.
Launch mode: start ``python -m sglang.launch_server`` on ``K3STACK_MODEL__CHECKPOINT`` with the
K3 recipe flags (:data:`K3_RECIPE_FLAGS`) plus ``K3STACK_MODEL__SGLANG_ARGS`` (e.g.
``--tp-size 8``), wait for its ``/health`` (logging progress), and forward to it; the server is
stopped with the service. SGLang is the optional ``sglang`` extra (:data:`SGLANG_VERSION`, a CUDA
machine's install, not in ``all``): without it, launch mode stops start-up with a message saying
what to install or set; another installed version is logged as a warning, since recipe flags
change between releases.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import logging
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import tenacity

from services.model.serving.backends.openai_proxy import OpenAIProxyBackend
from shared.settings import ModelSettings
from shared.until import until_async

log = logging.getLogger("k3stack.model.sglang")

#: The SGLang release the recipe flags are taken from (pyproject's ``sglang`` extra pins it).
SGLANG_VERSION = "0.5.23"

#: From the public K3 serving recipe, spelled as SGLang :data:`SGLANG_VERSION` spells them:
#: Kimi's tool-call / reasoning parsers, remote code for the model class, and the hybrid (KDA)
#: state cache in bf16 with the extra-buffer radix strategy, which keeps KDA checkpoints for
#: prefix reuse. ``--mamba-radix-cache-strategy`` is the name since mid-2026 (sgl-project/sglang
#: issue 27418 renamed ``--mamba-scheduler-strategy``, kept as a deprecated alias); releases
#: before the rename accept only the old name.
K3_RECIPE_FLAGS: tuple[str, ...] = (
    "--trust-remote-code",
    "--tool-call-parser", "kimi_k2",
    "--reasoning-parser", "kimi_k2",
    "--mamba-ssm-dtype", "bfloat16",
    "--mamba-radix-cache-strategy", "extra_buffer",
)  # fmt: skip


class SGLangUnavailable(RuntimeError):
    """SGLang cannot be launched here; the message says what to install or set."""


def sglang_command(
    checkpoint: Path,
    *,
    served_model_name: str,
    port: int,
    host: str = "127.0.0.1",
    extra_args: str = "",
    api_key: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The launch command line; later flags (``extra_args``) override the recipe's."""
    return [
        python, "-m", "sglang.launch_server",
        "--model-path", str(checkpoint),
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        *(("--api-key", api_key) if api_key else ()),
        *K3_RECIPE_FLAGS,
        *shlex.split(extra_args),
    ]  # fmt: skip


def installed_sglang() -> str | None:
    """The installed SGLang version, or None; another than the pinned one is logged."""
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if version != SGLANG_VERSION:
        log.warning(
            "SGLang %s is installed; the recipe flags are SGLang %s's (pip install "
            "'k3stack[sglang]'), so a flag may be unknown to this version",
            version, SGLANG_VERSION,
        )  # fmt: skip
    return version


class SGLangBackend(OpenAIProxyBackend):
    name = "sglang"

    def __init__(
        self,
        served_model_name: str,
        *,
        upstream_url: str,
        upstream_model: str | None = None,
        api_key: str | None = None,
        command: list[str] | None = None,
        startup_timeout_s: float = 900.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            served_model_name, upstream_url=upstream_url, upstream_model=upstream_model,
            api_key=api_key, transport=transport,
        )  # fmt: skip
        self.command = command
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @classmethod
    def from_settings(cls, s: ModelSettings) -> SGLangBackend:
        if s.upstream_url:
            return cls(
                s.served_model_name, upstream_url=s.upstream_url,
                upstream_model=s.upstream_model, api_key=s.upstream_api_key,
            )  # fmt: skip
        if installed_sglang() is None:
            raise SGLangUnavailable(
                f"engine 'sglang' needs SGLang {SGLANG_VERSION} installed to launch a server "
                "(pip install 'k3stack[sglang]' on a GPU machine), or K3STACK_MODEL__UPSTREAM_URL "
                "pointing at a running SGLang server to attach to"
            )
        if s.checkpoint is None:
            raise SGLangUnavailable(
                "engine 'sglang' launches on K3STACK_MODEL__CHECKPOINT (a Kimi K3 / Kimi Linear "
                "checkpoint directory); set it, or set K3STACK_MODEL__UPSTREAM_URL to attach"
            )
        cmd = sglang_command(
            s.checkpoint,
            served_model_name=s.upstream_model or s.served_model_name,
            port=s.sglang_port,
            extra_args=s.sglang_args,
            api_key=s.upstream_api_key,
        )
        return cls(
            s.served_model_name,
            upstream_url=f"http://127.0.0.1:{s.sglang_port}",
            upstream_model=s.upstream_model,
            api_key=s.upstream_api_key,
            command=cmd,
            startup_timeout_s=s.startup_timeout_s,
        )

    async def start(self) -> None:
        if self.command is None:
            log.info("attaching to the SGLang server at %s", self.base_url)
            return
        fd, name = tempfile.mkstemp(prefix="sglang-", suffix=".log")
        self._log_path = Path(name)
        log.info("launching SGLang: %s (log: %s)", shlex.join(self.command), name)
        self._proc = subprocess.Popen(  # noqa: S603 - our own command line
            self.command, stdout=fd, stderr=subprocess.STDOUT, start_new_session=True
        )
        os.close(fd)
        await self._wait_ready()

    async def _wait_ready(self) -> None:
        assert self._proc is not None
        proc, root, started = self._proc, self.base_url.removesuffix("/v1"), time.monotonic()

        async with httpx.AsyncClient(timeout=5.0) as client:

            async def healthy() -> bool:
                if (code := proc.poll()) is not None:
                    raise SGLangUnavailable(
                        f"the SGLang server exited with {code} during start-up:\n{self._tail()}"
                    )
                return (await client.get(f"{root}/health")).status_code == 200

            def note(state: tenacity.RetryCallState) -> None:
                if state.attempt_number % 15 == 0:
                    log.info("waiting for SGLang (%.0fs so far)...", time.monotonic() - started)

            if await until_async(healthy, self.startup_timeout_s, 1.0, errors=(httpx.HTTPError,),
                                 before_sleep=note):  # fmt: skip
                log.info("SGLang ready in %.0fs", time.monotonic() - started)
                return
        await self.stop()
        raise SGLangUnavailable(
            f"SGLang not ready after {self.startup_timeout_s:.0f}s:\n{self._tail()}"
        )

    def _tail(self, lines: int = 30) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        await super().stop()
