"""Which runtimes this host has, and the one decision of which a sandbox gets.

``make_runtimes`` builds every runtime of the registry, ``RUNTIMES`` (a runtime whose host
requirements are missing is still built, and says why in ``available()``); ``pick_runtime``
resolves a request's ``runtime`` (or the setting) to one of them, ``auto`` meaning microvm
when it is available here, else process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.sandbox.runtime.base import Runtime, RuntimeUnavailable
from shared.settings import Settings

RUNTIME_ORDER = ("microvm", "firecracker", "docker", "kubernetes", "process")  # as listed

RuntimeFactory = Callable[[Path, Settings], Runtime]
"""Builds one runtime from its folder (``<data_dir>/sandbox/<name>``) and the settings."""


def _process(root: Path, settings: Settings) -> Runtime:
    from services.sandbox.runtime.process import ProcessRuntime

    return ProcessRuntime(
        root, pids_max=settings.sandbox.guest_pids_max,
        ro_binds=tuple(settings.sandbox.process_ro_binds),
        guest_uid=settings.sandbox.process_guest_uid,
        guest_uids=settings.sandbox.process_guest_uids,
        usr_dirs=tuple(settings.sandbox.process_usr_dirs),
    )  # fmt: skip


def _docker(root: Path, settings: Settings) -> Runtime:
    from services.sandbox.runtime.docker import DockerRuntime

    return DockerRuntime(root, pids_max=settings.sandbox.guest_pids_max)


def _kubernetes(root: Path, settings: Settings) -> Runtime:
    from services.sandbox.runtime.kube import KubernetesRuntime

    return KubernetesRuntime(root)


def _firecracker(root: Path, settings: Settings) -> Runtime:
    from services.sandbox.runtime.firecracker import FirecrackerRuntime

    return FirecrackerRuntime(root)


def _microvm(root: Path, settings: Settings) -> Runtime:
    from services.sandbox.runtime.microvm import make_runtime

    return make_runtime(settings)  # its folder is the same ``<data_dir>/sandbox/microvm``


RUNTIMES: dict[str, RuntimeFactory] = {
    "process": _process,
    "docker": _docker,
    "kubernetes": _kubernetes,
    "firecracker": _firecracker,
    "microvm": _microvm,
}
"""The registry of runtimes: every name a request may give, with its factory (each imports
its runtime's module only when called)."""


def make_runtimes(settings: Settings) -> dict[str, Runtime]:
    """Every registered runtime, built with its folder under ``<data_dir>/sandbox/<name>``."""
    root = Path(settings.data_dir) / "sandbox"
    return {name: factory(root / name, settings) for name, factory in RUNTIMES.items()}


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
