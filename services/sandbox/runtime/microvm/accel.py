"""Which accelerator the microVM runtime boots guests with: KVM when a boot probe on this host
shows it works (``/dev/kvm`` on these machines is a nested PVM that fails on stock guest kernels,
so its presence proves nothing), else TCG.

A verdict is cached on disk per QEMU, guest kernel and host kernel. A probe that only ran out of
time (a loaded host, not a broken KVM) is no verdict: TCG until ``KVM_REPROBE_S`` has passed,
then the next start probes again, so a busy moment does not cost KVM for the life of the process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import subprocess
import threading
import time

from services.sandbox.images.builder import get_image, sandbox_cache_dir
from services.sandbox.runtime.base import SandboxSpec
from services.sandbox.runtime.microvm.launch import QEMU, connect_agent, discard, launch

log = logging.getLogger(__name__)

# Seconds of TCG after a KVM boot probe that timed out, before the next start probes again.
KVM_REPROBE_S = 600.0


class Accelerator:
    """``value``: ``kvm`` or ``tcg`` (``auto``: probed on first use, and again when due)."""

    def __init__(self, accel: str | None, shm: object, pids_max: int, jail: object = None) -> None:
        self._value = None if accel in (None, "auto") else accel
        self.shm, self.pids_max, self.jail = shm, pids_max, jail
        self._lock = threading.Lock()
        self.reprobe_at: float | None = None  # a timed-out probe runs again after this

    @property
    def value(self) -> str:
        with self._lock:
            due = self.reprobe_at is not None and time.monotonic() >= self.reprobe_at
            if self._value is None or due:
                self._value = self._probe()
            return self._value

    def describe(self) -> str:
        return self._value or "auto (probe)"

    def _probe(self) -> str:
        self.reprobe_at = None
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return "tcg"
        ver = subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout
        image = get_image("busybox")
        key = f"{ver.splitlines()[0] if ver else '?'}|{image.kernel.version}|{platform.release()}"
        cache = sandbox_cache_dir() / "accel.json"
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(cache.read_text())
            if data.get("key") == key:
                return data["accel"]
        accel, timed_out = "tcg", False
        try:
            vm = launch(image, SandboxSpec(), "kvm", incoming=False, boot_timeout=20, shm=self.shm,
                        pids_max=self.pids_max, jail=self.jail)  # fmt: skip
            try:
                agent = connect_agent(vm.sock_dir / "agent.sock", timeout_s=20)
                agent.ping()
                agent.close()
                accel = "kvm"
            except Exception:
                timed_out = vm.proc.poll() is None  # QEMU still up: the guest was only slow
                raise
            finally:
                discard(vm)
        except Exception as exc:  # noqa: BLE001 - any failure means "not usable"
            # QEMU that exits (KVM refused the guest: an MSR it cannot set, no nested support)
            # is a verdict; a QMP socket that only timed out is a busy host.
            timed_out = timed_out or isinstance(exc.__cause__, TimeoutError)
            log.info("KVM boot probe failed (%s)", str(exc).splitlines()[0][:200])
        if timed_out:
            self.reprobe_at = time.monotonic() + KVM_REPROBE_S
            log.warning("microvm: the KVM boot probe ran out of time (a loaded host?); using TCG "
                        "and probing again in %.0f s", KVM_REPROBE_S)  # fmt: skip
            return accel
        if accel == "tcg":
            log.warning("microvm: /dev/kvm does not boot the guest kernel here; using TCG")
        with contextlib.suppress(OSError):
            cache.write_text(json.dumps({"key": key, "accel": accel}))
        return accel
