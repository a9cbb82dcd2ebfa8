"""QEMU microvm runtime (see ``runtime``)."""

from services.sandbox.runtime.microvm.runtime import MicroVMRuntime, make_runtime

__all__ = ["MicroVMRuntime", "make_runtime"]
