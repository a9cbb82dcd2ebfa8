"""Which runtimes this host has, and the one decision of which a sandbox gets.

``make_runtimes`` builds every runtime the code knows (a runtime whose host requirements are
missing is still built, and says why in ``available()``); ``pick_runtime`` resolves a request's
``runtime`` (or the setting) to one of them, ``auto`` meaning microvm when it is available
here, else process.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from services.sandbox.runtime.base import Runtime, RuntimeUnavailable
from shared.settings import Settings

log = logging.getLogger("k3stack.sandbox")

RUNTIME_ORDER = ("microvm", "firecracker", "docker", "kubernetes", "process")


def make_runtimes(settings: Settings) -> dict[str, Runtime]:
    """Every runtime, built with its folder under ``<data_dir>/sandbox/<runtime>``."""
    root = Path(settings.data_dir) / "sandbox"
    runtimes: dict[str, Runtime] = {}
    from services.sandbox.runtime.process import ProcessRuntime

    runtimes["process"] = ProcessRuntime(
        root / "process", pids_max=settings.sandbox.guest_pids_max,
        ro_binds=tuple(settings.sandbox.process_ro_binds),
        guest_uid=settings.sandbox.process_guest_uid,
        guest_uids=settings.sandbox.process_guest_uids,
        usr_dirs=tuple(settings.sandbox.process_usr_dirs),
    )  # fmt: skip
    from services.sandbox.runtime.docker import DockerRuntime

    runtimes["docker"] = DockerRuntime(root / "docker", pids_max=settings.sandbox.guest_pids_max)
    from services.sandbox.runtime.kube import KubernetesRuntime

    runtimes["kubernetes"] = KubernetesRuntime(root / "kubernetes")
    from services.sandbox.runtime.firecracker import FirecrackerRuntime

    runtimes["firecracker"] = FirecrackerRuntime(root / "firecracker")
    microvm = _load_microvm(root / "microvm", settings)
    if microvm is not None:
        runtimes["microvm"] = microvm
    return runtimes


def _load_microvm(root: Path, settings: Settings) -> Runtime | None:
    """The QEMU microvm runtime, if its package is present (it is built separately)."""
    try:
        mod = importlib.import_module("services.sandbox.runtime.microvm")
    except ImportError as exc:
        log.info("microvm runtime not importable: %s", exc)
        return None
    factory = getattr(mod, "make_runtime", None)
    if factory is not None:
        return factory(settings)
    cls = getattr(mod, "MicroVMRuntime", None)
    if cls is None:
        log.warning("services.sandbox.runtime.microvm has neither make_runtime nor MicroVMRuntime")
        return None
    return cls(root)


def pick_runtime(requested: str | None, default: str, runtimes: dict[str, Runtime]) -> Runtime:
    """The runtime for a new sandbox. ``auto`` = microvm when available, else process.

    Raises:
        RuntimeUnavailable: the named runtime is unknown or cannot run on this host.
    """
    name = requested or default
    if name == "auto":
        mv = runtimes.get("microvm")
        if mv is not None and mv.available()[0]:
            return mv
        name = "process"
    rt = runtimes.get(name)
    if rt is None:
        raise RuntimeUnavailable(
            f"runtime {name!r} is not installed here; choose one of {sorted(runtimes)}"
        )
    ok, why = rt.available()
    if not ok:
        hint = " (run scripts/setup_sandbox.sh)" if name == "microvm" else ""
        raise RuntimeUnavailable(f"runtime {name!r} is unavailable on this host: {why}{hint}")
    return rt
