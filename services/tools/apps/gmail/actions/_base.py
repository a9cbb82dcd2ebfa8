"""Gmail's shared constants (system labels, limits) and its API error type."""

from __future__ import annotations

from typing import Any

APP = "gmail"
DEFAULT_ADDRESS = "me@k3stack.test"
SYSTEM_LABELS = [
    "CHAT",
    "SENT",
    "INBOX",
    "IMPORTANT",
    "TRASH",
    "DRAFT",
    "SPAM",
    "CATEGORY_FORUMS",
    "CATEGORY_UPDATES",
    "CATEGORY_PERSONAL",
    "CATEGORY_PROMOTIONS",
    "CATEGORY_SOCIAL",
    "STARRED",
    "UNREAD",
]
# Labels a client may not add or remove by hand (Gmail sets them itself).
FIXED_LABELS = {"SENT", "DRAFT", "CHAT"}
HIDDEN_SYSTEM = {
    "CHAT",
    "CATEGORY_FORUMS",
    "CATEGORY_UPDATES",
    "CATEGORY_PERSONAL",
    "CATEGORY_PROMOTIONS",
    "CATEGORY_SOCIAL",
}
MAX_BATCH = 1000

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
}
_REASON = {
    400: "badRequest",
    401: "authError",
    403: "forbidden",
    404: "notFound",
    405: "methodNotAllowed",
    409: "duplicate",
    412: "failedPrecondition",
    413: "uploadTooLarge",
    429: "rateLimitExceeded",
    500: "backendError",
}


class GmailError(Exception):
    """An error in Google's shape: ``{"error": {"code", "message", "errors", "status"}}``."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASON.get(code, "error")

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.reason)


def error_body(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [
                {
                    "message": message,
                    "domain": "global",
                    "reason": reason or _REASON.get(code, "error"),
                }
            ],
            "status": _STATUS.get(code, "UNKNOWN"),
        }
    }


def not_found() -> GmailError:
    return GmailError(404, "Requested entity was not found.")
