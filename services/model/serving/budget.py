"""Budget-aware decoding: thinking capped exactly, and constrained output that closes in time.

A grammar (:mod:`~services.model.serving.structured`) says what may come next, not how many
tokens are left. :class:`BudgetedProcessor` wraps it with the request's token budget:

- **thinking** is capped at the request's thinking budget exactly: once that many tokens were
  thought, the ``think`` channel is closed (``[close]think[sep]``), grammar or not;
- **closing**: near the end of ``max_tokens`` it asks, on a fork of the grammar matcher, how many
  tokens the shortest way to finish takes (:func:`closing_step`: forced text jumps ahead, an open
  JSON string is ended, an open container closed, an optional element skipped). When that no
  longer leaves a margin, every later token is that closing step, so string arguments and JSON
  strings end early and the object closes within ``max_tokens``; while the margin is thin no new
  optional element (an ``[open]``) starts. Inside a grammar's text (a custom tool's Lark or regex
  input) the cheapest next token need not lead to an end (``*** Add File`` before ``*** End``
  repeats forever), so there the way to the nearest end is searched (:func:`search_close`). If even the shortest close cannot fit, the output is
  cut, and the API says ``length`` with a ``truncated`` flag rather than repairing it;
- **control characters** (bytes 0x00-0x1F) never go into a JSON string.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from services.model.tokenizer.base import CLOSE, END_OF_MSG, OPEN, SEP, Tokenizer

if TYPE_CHECKING:
    import xgrammar as xgr

    from services.model.serving.structured import GrammarProcessor

#: Extra tokens kept in hand beyond the shortest close (a free token may open a string).
MARGIN = 4
#: Below this margin over the shortest close, no new optional element starts.
NO_NEW_ELEMENT = 24
#: At most this many steps are simulated to find the shortest close.
MAX_CLOSE_STEPS = 512
#: At most this many tokens are tried when searching a grammar's way to its end.
MAX_SEARCH = 4000
#: Seconds of the engine thread's CPU one search (or one closing estimate) may take in a step,
#: so a grammar whose matcher work is slow cannot hold the step for everyone.
SEARCH_CPU_S = 0.5


@dataclass(frozen=True)
class Vocab:
    """What the budget logic needs to know about the tokenizer's ids."""

    open: int
    sep: int
    close: int
    end: int
    quote: int
    closers: dict[str, int]  # "}" / "]" -> id
    token_bytes: tuple[bytes, ...]
    specials: frozenset[int]
    think: tuple[int, ...]  # "think" as ordinary tokens
    blank: frozenset[int]  # whitespace-only tokens (never picked when closing)
    control: torch.Tensor  # tokens with a byte 0x00-0x1F
    #: [k] -> whether a token ends a character needing k more bytes and leaves none unfinished
    finishes: tuple[torch.Tensor, ...]
    ascii: tuple[int, ...] = ()  # one-byte printable (or tab / newline) tokens
    encode: Callable[[str], list[int]] = field(compare=False, repr=False, default=lambda s: [])


def vocab_of(tokenizer: Tokenizer) -> Vocab:
    raw = [tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)]
    specials = frozenset(i for i in range(tokenizer.vocab_size) if tokenizer.is_special(i))

    def one(ch: str) -> int:
        ids = tokenizer.encode(ch)
        assert len(ids) == 1, f"{ch!r} is not one token"
        return ids[0]

    return Vocab(
        open=tokenizer.special_id(OPEN),
        sep=tokenizer.special_id(SEP),
        close=tokenizer.special_id(CLOSE),
        end=tokenizer.special_id(END_OF_MSG),
        quote=one('"'),
        closers={"}": one("}"), "]": one("]")},
        token_bytes=tuple(raw),
        specials=specials,
        think=tuple(tokenizer.encode("think")),
        blank=frozenset(i for i, b in enumerate(raw) if b and not b.strip() and i not in specials),
        control=torch.tensor(
            [i for i, b in enumerate(raw) if i not in specials and any(c < 0x20 for c in b)],
            dtype=torch.long,
        ),
        finishes=tuple(
            torch.tensor([i in specials or _finishes(b, k) for i, b in enumerate(raw)])
            for k in range(4)
        ),
        ascii=tuple(
            i
            for i, b in enumerate(raw)
            if i not in specials and len(b) == 1 and (0x20 <= b[0] < 0x7F or b in b"\t\n")
        ),
        encode=tokenizer.encode,
    )


def _finishes(data: bytes, k: int) -> bool:
    """``data`` starts with the ``k`` continuation bytes a character lacks, then whole UTF-8."""
    if len(data) < k or any(c & 0xC0 != 0x80 for c in data[:k]):
        return False
    try:
        data[k:].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def utf8_tail(tail: bytes, data: bytes) -> bytes:
    """The bytes of an unfinished UTF-8 character at the end of ``tail + data``."""
    buf = (tail + data)[-4:]
    for back in range(1, min(4, len(buf)) + 1):
        c = buf[-back]
        if c & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4
            return b"" if back >= need else buf[-back:]
    return b""


def utf8_need(tail: bytes) -> int:
    """Continuation bytes the unfinished character ``tail`` still lacks."""
    if not tail:
        return 0
    c = tail[0]
    need = 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4
    return max(0, need - len(tail))


@dataclass
class Scan:
    """Where the output is in XTML and, inside JSON, in strings and containers."""

    json_format: bool = False  # the response channel holds JSON
    header: bytes | None = None  # bytes of an element header being read
    json: bool = False  # inside a JSON body (a typed arg, a json block, a JSON response)
    in_string: bool = False
    escape: bool = False
    stack: list[str] = field(default_factory=list)  # expected closers, innermost last

    def copy(self) -> Scan:
        return replace(self, stack=list(self.stack))

    def push(self, token: int, vocab: Vocab) -> None:
        if token in vocab.specials:
            if token in (vocab.open, vocab.close):
                self.header, self.json = b"", False
                self.in_string = self.escape = False
                self.stack.clear()
            elif token == vocab.sep and self.header is not None:
                h, self.header = self.header, None
                self.json = h == b"json" or b'type="json"' in h
                self.json |= h == b"response" and self.json_format
            return
        data = vocab.token_bytes[token]
        if self.header is not None:
            self.header += data
            return
        if not self.json:
            return
        for c in data:
            if self.escape:
                self.escape = False
            elif self.in_string:
                if c == 0x5C:  # backslash
                    self.escape = True
                elif c == 0x22:
                    self.in_string = False
            elif c == 0x22:
                self.in_string = True
            elif c in b"{[":
                self.stack.append("}" if c == 0x7B else "]")
            elif c in b"}]" and self.stack:
                self.stack.pop()


def _allowed(bitmask: torch.Tensor, token: int) -> bool:
    return bool((int(bitmask[0, token // 32]) >> (token % 32)) & 1)


def _ends(matcher: xgr.GrammarMatcher, mask: torch.Tensor, vocab: Vocab) -> bool:
    """The grammar's text may end here (its element closes, or the output stops)."""
    return matcher.is_terminated() or any(
        _allowed(mask, t) for t in (vocab.close, vocab.end, vocab.sep)
    )


def search_close(matcher: xgr.GrammarMatcher, vocab: Vocab, never: set[int]) -> list[int]:
    """The fewest one-byte tokens (and forced text's own first token) that take ``matcher`` to
    where its text may end, found breadth first on forks; [] when not found within
    :data:`MAX_SEARCH` tries. States with the same mask and forced text count as one."""
    import xgrammar as xgr

    size = len(vocab.token_bytes)
    words = (size + 31) // 32
    root = matcher.fork()
    mask = xgr.allocate_token_bitmask(1, size)
    root.fill_next_token_bitmask(mask)
    if _ends(root, mask, vocab):
        return []
    seen = {(mask.numpy().tobytes(), root.find_jump_forward_string())}
    frontier: list[tuple[xgr.GrammarMatcher, list[int], torch.Tensor]] = [(root, [], mask)]
    tries = 0
    deadline = time.thread_time() + SEARCH_CPU_S
    while frontier and tries < MAX_SEARCH and time.thread_time() < deadline:
        following = []
        for node, path, node_mask in frontier:
            if time.thread_time() > deadline:
                break
            forced = node.find_jump_forward_string()
            first = vocab.encode(forced)[:1] if forced else []
            for t in [*first, *vocab.ascii]:
                if t in never or not _allowed(node_mask, t):
                    continue
                child = node.fork()
                tries += 1
                if not child.accept_token(t):
                    continue
                child_mask = xgr.allocate_token_bitmask(1, words * 32)
                child.fill_next_token_bitmask(child_mask)
                if _ends(child, child_mask, vocab):
                    return [*path, t]
                key = (child_mask.numpy().tobytes(), child.find_jump_forward_string())
                if key not in seen:
                    seen.add(key)
                    following.append((child, [*path, t], child_mask))
        frontier = following
    return []


def closing_path(
    matcher: xgr.GrammarMatcher, bitmask: torch.Tensor, scan: Scan, vocab: Vocab, never: set[int]
) -> list[int]:
    """The next token(s) of the shortest way to finish (``bitmask`` already filled for this
    state): one token, or inside a grammar's text the searched way to its end; [] when the
    grammar allows nothing."""
    if scan.header is None and not scan.json and (path := search_close(matcher, vocab, never)):
        return path
    forced = matcher.find_jump_forward_string()
    if forced:  # the tokenizer's own (short) spelling of the forced text, when it fits
        ids = vocab.encode(forced)
        if ids and _allowed(bitmask, ids[0]) and ids[0] not in never:
            return ids[:1]
        jump = matcher.find_jump_forward_tokens()
        if jump:
            return jump[:1]
    prefs: list[int] = []
    if scan.json and scan.in_string:
        prefs.append(vocab.quote)
    elif scan.json and scan.stack:
        prefs.append(vocab.closers[scan.stack[-1]])
    prefs += [vocab.close, vocab.end, vocab.sep, vocab.quote]
    for t in prefs:
        if t < bitmask.shape[1] * 32 and _allowed(bitmask, t) and t not in never:
            return [t]
    ids = torch.nonzero(
        (bitmask[0].unsqueeze(1) >> torch.arange(32, dtype=torch.int32)) & 1
    ).tolist()
    allowed = [w * 32 + b for w, b in ids]
    allowed = [t for t in allowed if t < len(vocab.token_bytes) and t not in never]
    if not allowed:
        return []
    plain = [t for t in allowed if t not in vocab.blank]
    return [(plain or allowed)[0]]


def closing_step(
    matcher: xgr.GrammarMatcher, bitmask: torch.Tensor, scan: Scan, vocab: Vocab, never: set[int]
) -> int | None:
    """The next token of the shortest way to finish, or None when the grammar allows nothing."""
    path = closing_path(matcher, bitmask, scan, vocab, never)
    return path[0] if path else None


def closing_cost(
    matcher: xgr.GrammarMatcher, bitmask: torch.Tensor, scan: Scan, vocab: Vocab, never: set[int]
) -> int:
    """Tokens the shortest close takes from ``matcher``'s state (on a fork; stop included)."""
    import xgrammar as xgr

    fork = matcher.fork()
    scan = scan.copy()
    mask = xgr.allocate_token_bitmask(1, bitmask.shape[1] * 32)
    n = 0
    deadline = time.thread_time() + SEARCH_CPU_S
    while n < MAX_CLOSE_STEPS and time.thread_time() < deadline:
        if fork.is_terminated():
            return n
        fork.fill_next_token_bitmask(mask)
        path = closing_path(fork, mask, scan, vocab, never)
        if not path:
            return MAX_CLOSE_STEPS
        for token in path:
            if not fork.accept_token(token):
                return MAX_CLOSE_STEPS
            scan.push(token, vocab)
        n += len(path)
    return MAX_CLOSE_STEPS


class BudgetedProcessor:
    """A :class:`~services.model.serving.sampling.LogitsProcessor`: the grammar (if any), the
    thinking cap and, with a grammar, closing within ``max_tokens``."""

    def __init__(
        self,
        vocab: Vocab,
        grammar: GrammarProcessor | None,
        *,
        thinking: bool,
        think_budget: int | None,
        json_format: bool = False,
    ) -> None:
        self.vocab = vocab
        self.grammar = grammar
        self.thinking = thinking  # the think channel is open
        self.think_budget = think_budget
        self.max_tokens: int | None = None  # set by the engine once it knows it
        self.num_tokens = 0
        self.think_tokens = 0
        self.closing = False
        self._think_close: list[int] = []  # forced close of think, without a grammar
        self.scan = Scan(json_format=json_format)
        self._tail = b""  # an unfinished UTF-8 character at the end of the thought
        self._never = set(grammar.never.tolist()) if grammar is not None else set()
        self._plan: list[int] = []  # the rest of a searched way to the grammar's end

    def set_max_tokens(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    def _force(self, logits: torch.Tensor, token: int) -> None:
        keep = logits[token].clone()
        logits.fill_(float("-inf"))
        logits[token] = keep if bool(torch.isfinite(keep)) else 0.0

    def mask(self, logits: torch.Tensor) -> None:
        g = self.grammar
        if g is not None:
            g.mask(logits)
            if self.scan.json and self.scan.in_string:
                control = self.vocab.control
                logits[control[control < logits.numel()]] = float("-inf")
        if self._think_close:
            self._force(logits, self._think_close[0])
            return
        out_of_thought = (
            self.thinking
            and self.think_budget is not None
            and self.think_tokens >= self.think_budget
        )
        if (
            self.thinking
            and self.think_budget is not None
            and self.think_budget - self.think_tokens <= 3
        ):  # near the cap: finish the character and start no other, so the thought closes on time
            ok = self.vocab.finishes[min(3, utf8_need(self._tail))]
            n = min(ok.numel(), logits.numel())
            masked = logits[:n].masked_fill(~ok[:n], float("-inf"))
            if bool(torch.isfinite(masked).any()):
                logits[:n] = masked
        if g is None:
            if out_of_thought:
                self._think_close = [self.vocab.close, *self.vocab.think, self.vocab.sep]
                self._force(logits, self._think_close[0])
            return
        if g.matcher.is_terminated():
            return
        left = None if self.max_tokens is None else self.max_tokens - self.num_tokens
        if not self.closing and left is not None and left <= MAX_CLOSE_STEPS:
            cost = closing_cost(g.matcher, g.bitmask, self.scan, self.vocab, self._never)
            if cost + MARGIN >= left:
                self.closing = True
            elif cost + NO_NEW_ELEMENT >= left and self.vocab.open < logits.numel():
                if bool(torch.isfinite(logits[self.vocab.open])):
                    others = logits.clone()
                    others[self.vocab.open] = float("-inf")
                    if bool(torch.isfinite(others).any()):
                        logits[self.vocab.open] = float("-inf")
        if self.closing or out_of_thought:
            if not (self._plan and _allowed(g.bitmask, self._plan[0])):
                self._plan = closing_path(g.matcher, g.bitmask, self.scan, self.vocab, self._never)
            if self._plan:
                self._force(logits, self._plan[0])

    def accept(self, token: int) -> None:
        self.num_tokens += 1
        self._plan = self._plan[1:] if self._plan[:1] == [token] else []
        if self._think_close and token == self._think_close[0]:
            self._think_close.pop(0)
        if self.thinking:
            if token == self.vocab.close:
                self.thinking = False
            else:
                self.think_tokens += 1
                if token not in self.vocab.specials:
                    self._tail = utf8_tail(self._tail, self.vocab.token_bytes[token])
        self.scan.push(token, self.vocab)
        if self.grammar is not None:
            self.grammar.accept(token)
