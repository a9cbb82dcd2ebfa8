"""Tokenising prompts off the serving loop, in a pool of its own, and refusing long ones cheaply.

A prompt is counted piece by piece (:func:`count_upto`), stopping as soon as it passes the
context, before any full tokenisation: a 2 MiB body is refused after the first few hundred KiB,
not after all of it. The work runs in :class:`TokenizePool`'s few threads, never the default
executor the rest of the service shares, and a request that is cancelled (its client left) stops
at the next piece.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from services.model.tokenizer.base import Tokenizer

T = TypeVar("T")

#: Characters per piece of a bounded count.
PIECE_CHARS = 16384


class Cancelled(Exception):
    """The request was cancelled while its prompt was being tokenised."""


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in pieces of about ``size`` characters, each cut just before a whitespace that
    follows a non-whitespace (where a BPE pre-tokeniser splits anyway)."""
    start = 0
    while len(text) - start > size:
        cut = start + size
        while cut < len(text) and not (text[cut].isspace() and not text[cut - 1].isspace()):
            cut += 1
            if cut - start > 2 * size:  # no such place: cut anyway (the count is then approximate)
                break
        yield text[start:cut]
        start = cut
    if start < len(text):
        yield text[start:]


def count_upto(
    tokenizer: Tokenizer,
    segments: Iterable[tuple[str, bool]],
    limit: int,
    cancel: threading.Event | None = None,
    *,
    allow_special: bool = False,
) -> int:
    """Tokens of ``segments`` (text, is_special), stopping once the count passes ``limit``.

    Each cut between pieces may add a token the whole text would not have, so a count over
    ``limit`` is reported only when it is over by more than the cuts made."""
    count = cuts = 0
    for text, special in segments:
        if special:
            count += 1
            continue
        for i, piece in enumerate(pieces(text)):
            if cancel is not None and cancel.is_set():
                raise Cancelled
            cuts += i > 0
            count += len(tokenizer.encode(piece, allow_special=allow_special))
            if count - cuts > limit:
                return count - cuts
    return count - cuts


#: Prompts of fewer characters than this take the small lane.
SMALL_CHARS = 65536


class TokenizePool:
    """Bounded pools of tokenising threads, separate from the event loop and its executor: one
    lane for large prompts and one for small ones, so a 1-token chat never queues behind a
    burst of huge bodies being refused."""

    def __init__(self, workers: int = 2) -> None:
        self._large = ThreadPoolExecutor(workers, thread_name_prefix="k3-tokenize")
        self._small = ThreadPoolExecutor(workers, thread_name_prefix="k3-tokenize-small")

    async def run(self, fn: Callable[..., T], *args: object, chars: int = 0) -> T:
        """``fn(*args, cancel=event)`` in the lane for a prompt of about ``chars`` characters;
        cancelling the caller sets ``event``."""
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        pool = self._small if chars < SMALL_CHARS else self._large
        future = loop.run_in_executor(pool, functools.partial(fn, *args, cancel=cancel))
        try:
            return await future
        except asyncio.CancelledError:
            cancel.set()
            raise

    def shutdown(self) -> None:
        for pool in (self._large, self._small):
            pool.shutdown(wait=False, cancel_futures=True)


def approx_chars(value: object, limit: int = SMALL_CHARS) -> int:
    """Characters of the strings in a request body's value, counted until ``limit``."""
    total, stack = 0, [value]
    while stack and total < limit:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
        elif hasattr(v, "__dict__"):
            stack.extend(vars(v).values())
    return total
