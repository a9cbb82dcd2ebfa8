"""One error shape for every service: ``{"code", "error_code", "message"}``.

Routes raise :class:`APIError`; the handlers installed by :func:`shared.app.create_app` turn it,
request-validation failures and unexpected exceptions into this body, so clients (and
:class:`shared.clients.ServiceError`) always find a machine code and a human message.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Error(BaseModel):
    """The body of every non-2xx response."""

    code: int = Field(description="HTTP status code, repeated in the body.")
    error_code: str = Field(description="Machine-readable reason, e.g. `not_found`.")
    message: str = Field(description="What went wrong, for a person.")


class APIError(Exception):
    """Raise from a route to answer with an :class:`Error` body."""

    def __init__(self, status: int, error_code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def to_error(self) -> Error:
        return Error(code=self.status, error_code=self.error_code, message=self.message)


def not_found(kind: str, ident: str) -> APIError:
    return APIError(404, "not_found", f"{kind} {ident!r} does not exist")


def bad_request(message: str, error_code: str = "invalid_request") -> APIError:
    return APIError(400, error_code, message)


def conflict(message: str, error_code: str = "conflict") -> APIError:
    return APIError(409, error_code, message)
