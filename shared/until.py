"""Waiting for a server to come up: its probe asked again, by tenacity, until it says yes.

A probe that raises one of ``errors`` (connection refused while the process starts) counts as
"not yet", like one that answers False; any other exception ends the wait at once. One policy
for every such wait (the verifier's app servers, the SGLang backend, the benches' services)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import tenacity


def _policy(timeout_s: float, every_s: float, errors: tuple[type[BaseException], ...],
            before_sleep: Callable[[tenacity.RetryCallState], Any] | None) -> dict[str, Any]:  # fmt: skip
    return {
        "retry": tenacity.retry_if_exception_type(errors)
        | tenacity.retry_if_result(lambda ok: not ok),
        "stop": tenacity.stop_after_delay(timeout_s),
        "wait": tenacity.wait_fixed(every_s),
        "retry_error_callback": lambda _: False,
        "before_sleep": before_sleep,
    }


def until(probe: Callable[[], bool], timeout_s: float, every_s: float,
          errors: tuple[type[BaseException], ...] = (),
          before_sleep: Callable[[tenacity.RetryCallState], Any] | None = None) -> bool:  # fmt: skip
    """Whether ``probe()`` said yes within ``timeout_s``, asked every ``every_s``."""
    return tenacity.Retrying(**_policy(timeout_s, every_s, errors, before_sleep))(probe)


async def until_async(probe: Callable[[], Awaitable[bool]], timeout_s: float, every_s: float,
                      errors: tuple[type[BaseException], ...] = (),
                      before_sleep: Callable[[tenacity.RetryCallState], Any] | None = None,
                      ) -> bool:  # fmt: skip
    """:func:`until` for an async probe."""
    return await tenacity.AsyncRetrying(**_policy(timeout_s, every_s, errors, before_sleep))(probe)
