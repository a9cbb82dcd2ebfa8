"""The ``process`` runtime (see :mod:`~services.sandbox.runtime.process.runtime`)."""

from services.sandbox.runtime.process.runtime import ProcessRuntime

__all__ = ["ProcessRuntime"]
