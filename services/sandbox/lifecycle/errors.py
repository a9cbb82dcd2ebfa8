"""Domain errors of the sandbox service: what went wrong, in the domain's words.

The lifecycle code raises these; it knows nothing of HTTP. ``services/sandbox/api/errors.py``
maps each kind to a status once (not found 404, invalid 400, conflict 409, too large 413,
unavailable 503, internal 500), for the routes and the envd data plane alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from services.sandbox.runtime.base import (
    CheckpointError,
    GuestAgentError,
    GuestFileError,
    GuestFileNotFound,
    GuestFileTooLarge,
    GuestPathError,
    RuntimeUnavailable,
    SandboxNotRunning,
    UnsupportedOperation,
)

log = logging.getLogger("k3stack.sandbox")


class SandboxError(Exception):
    """Base: ``error_code`` is the machine-readable reason, ``message`` says it to a person."""

    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class NotFound(SandboxError):
    """The sandbox, checkpoint, template or guest file does not exist (or was killed)."""

    @classmethod
    def of(cls, kind: str, ident: str) -> NotFound:
        return cls("not_found", f"{kind} {ident!r} does not exist")


class Invalid(SandboxError):
    """The request is malformed or out of bounds."""


class Conflict(SandboxError):
    """Not possible in the current state (paused, running, in use, unsupported here)."""


class TooLarge(SandboxError):
    """A file or upload is over the limit."""


class Unavailable(SandboxError):
    """The runtime it needs is not usable on this host."""


class Internal(SandboxError):
    """A runtime or storage failure the caller cannot fix (the message names the sandbox)."""


@contextmanager
def runtime_errors(sandbox_id: str = "") -> Iterator[None]:
    """Turn runtime exceptions into domain errors (``api/errors.py`` maps those to HTTP)."""
    try:
        yield
    except SandboxError:
        raise
    except GuestPathError as exc:
        raise Invalid("invalid_path", str(exc)) from exc
    except GuestFileNotFound as exc:
        raise NotFound("file_not_found", str(exc)) from exc
    except GuestFileTooLarge as exc:
        raise TooLarge("too_large", str(exc)) from exc
    except GuestFileError as exc:
        # EEXIST EISDIR ENOTDIR ENOTEMPTY are conflicts with what is there
        cls = Conflict if exc.errno in (17, 21, 20, 39) else Invalid
        raise cls("file_error", str(exc)) from exc
    except UnsupportedOperation as exc:
        raise Conflict("unsupported", str(exc)) from exc
    except SandboxNotRunning as exc:
        raise Conflict("not_running", str(exc)) from exc
    except RuntimeUnavailable as exc:
        raise Unavailable("runtime_unavailable", str(exc)) from exc
    except (GuestAgentError, CheckpointError) as exc:
        where = f" (sandbox {sandbox_id})" if sandbox_id else ""
        log.exception("runtime failure%s", where)
        raise Internal("runtime_error", f"{exc}{where}") from exc
