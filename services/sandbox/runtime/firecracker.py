"""The ``firecracker`` runtime (work in progress in this commit: availability only)."""

from __future__ import annotations

import shutil
from pathlib import Path

from services.sandbox.runtime.base import Runtime, RuntimeCapabilities, RuntimeUnavailable


class FirecrackerRuntime(Runtime):
    name = "firecracker"
    capabilities = RuntimeCapabilities(memory_checkpoint=True, fork=True, network_allowlist=False)

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def available(self) -> tuple[bool, str]:
        binary = shutil.which("firecracker")
        if not binary:
            return False, "firecracker binary not on PATH"
        return True, binary

    def _no(self, *_a, **_k):  # type: ignore[no-untyped-def]
        raise RuntimeUnavailable("firecracker runtime not implemented yet")

    create = checkpoint = stop = restore = destroy = exec = exec_stream = _no  # type: ignore[assignment]
    kill_process = read_file = write_file = list_dir = stat = remove = _no  # type: ignore[assignment]

    def is_alive(self, h) -> bool:  # type: ignore[no-untyped-def]
        return False
