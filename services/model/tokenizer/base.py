"""The tokenizer interface the template, engine and API share.

Two implementations sit behind it: :class:`~services.model.tokenizer.hf_bpe.HFByteBPETokenizer`
(the byte-level BPE shipped in this repo for the tiny presets, or any ``tokenizer.json``) and
:class:`~services.model.tokenizer.tiktoken_bpe.TiktokenTokenizer` (the ``tiktoken.model`` file
Kimi checkpoints ship). Both are byte-level, which is what makes streaming detokenisation simple:
every non-special token maps to a fixed byte string, so an incremental UTF-8 decoder over those
bytes yields exactly the text of the whole sequence, with no re-decoding of a growing window.
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The four reserved XTML tokens of the K3 chat template (report appendix F).
OPEN, SEP, CLOSE, END_OF_MSG = "[open]", "[sep]", "[close]", "[end_of_msg]"
XTML_TOKENS: tuple[str, ...] = (OPEN, SEP, CLOSE, END_OF_MSG)


class TokenizerError(ValueError):
    """A tokenizer could not be loaded, or lacks a token the caller needs."""


class Tokenizer(ABC):
    """Byte-level tokenizer with named special tokens.

    ``encode`` never turns text into special tokens unless ``allow_special`` is set, so message
    content that happens to spell ``[open]`` cannot inject template structure.
    """

    name: str
    #: Size of the id space, specials included; the model's vocab must be at least this.
    vocab_size: int
    #: Special token text -> id.
    special_tokens: dict[str, int]

    @abstractmethod
    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        """Token ids of ``text``; specials are recognised only when ``allow_special``."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (a special token: its text in UTF-8)."""

    def _index_specials(self) -> None:
        """Build the id -> text map of specials; implementations call it after loading."""
        self._special_ids = {i: t for t, i in self.special_tokens.items()}

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    def special_text(self, token_id: int) -> str | None:
        return self._special_ids.get(token_id)

    def special_id(self, text: str) -> int:
        """Id of a special token; raises :class:`TokenizerError` naming it when absent."""
        try:
            return self.special_tokens[text]
        except KeyError:
            raise TokenizerError(
                f"tokenizer {self.name!r} has no special token {text!r}; "
                f"it has {sorted(self.special_tokens)[:12]}"
            ) from None

    def has_xtml(self) -> bool:
        """Whether the XTML chat template can be rendered with this tokenizer."""
        return all(t in self.special_tokens for t in XTML_TOKENS)

    def decode(self, token_ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Text of ``token_ids``; invalid UTF-8 becomes U+FFFD, unknown ids are dropped."""
        out = bytearray()
        for tid in token_ids:
            if skip_special and self.is_special(tid):
                continue
            if 0 <= tid < self.vocab_size:
                out += self.token_bytes(tid)
        return out.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Piece:
    """One step of detokenised output: text, or one special token (``special`` = its text)."""

    text: str
    special: bool = False


class IncrementalDecoder:
    """Turns generated token ids into :class:`Piece` s as they arrive.

    Text is held back only while a UTF-8 sequence is incomplete; a special token flushes the
    pending bytes first (an incomplete sequence there becomes U+FFFD, as a full decode would).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> list[Piece]:
        tok = self.tokenizer
        special = tok.special_text(token_id)
        if special is not None:
            pieces = []
            rest = self._utf8.decode(b"", final=True)
            self._utf8.reset()
            if rest:
                pieces.append(Piece(rest))
            pieces.append(Piece(special, special=True))
            return pieces
        if not 0 <= token_id < tok.vocab_size:
            return []
        text = self._utf8.decode(tok.token_bytes(token_id))
        return [Piece(text)] if text else []

    def flush(self) -> list[Piece]:
        rest = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return [Piece(rest)] if rest else []

    def extend(self, token_ids: Sequence[int]) -> list[Piece]:
        out: list[Piece] = []
        for tid in token_ids:
            out.extend(self.push(tid))
        return out
