"""A byte-level BPE ``tokenizer.json`` (Hugging Face ``tokenizers``) behind :class:`Tokenizer`.

Used for the tokenizer shipped in ``data/`` for the tiny presets, and for any checkpoint that
ships a byte-level ``tokenizer.json`` instead of a ``tiktoken.model``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from services.model.tokenizer.base import Tokenizer, TokenizerError


@cache
def byte_to_char() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes are shifted to U+0100 and
    up, in byte order, so every token string is printable and maps back to bytes one to one.
    """
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


@cache
def char_to_byte() -> dict[str, int]:
    return {c: b for b, c in byte_to_char().items()}


class HFByteBPETokenizer(Tokenizer):
    """Wraps a byte-level BPE ``tokenizers.Tokenizer``; specials are its added special tokens."""

    def __init__(self, hf: _HFTokenizer, name: str = "bpe") -> None:
        self.name = name
        self._hf = hf
        # A second copy that never matches specials in text: content must not inject structure.
        # (Two objects rather than toggling a flag, because the engine thread and the event
        # loop encode concurrently.)
        self._plain = _HFTokenizer.from_str(hf.to_str())
        self._plain.encode_special_tokens = True
        self.special_tokens = {
            tok.content: tid for tid, tok in hf.get_added_tokens_decoder().items() if tok.special
        }
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)
        c2b = char_to_byte()
        table: list[bytes] = []
        for tid in range(self.vocab_size):
            piece = hf.id_to_token(tid)
            if piece is None:
                table.append(b"")
            elif piece in self.special_tokens:
                table.append(piece.encode())
            else:
                try:
                    table.append(bytes(c2b[c] for c in piece))
                except KeyError:
                    raise TokenizerError(
                        f"{name}: token {tid} {piece!r} is not byte-level; only byte-level BPE "
                        "tokenizer.json files are supported"
                    ) from None
        self._bytes = table
        self._index_specials()

    @classmethod
    def from_file(cls, path: Path) -> HFByteBPETokenizer:
        try:
            hf = _HFTokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - the library raises bare Exceptions
            raise TokenizerError(f"cannot read tokenizer file {path}: {exc}") from exc
        return cls(hf, name=str(path))

    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        if not text:
            return []
        hf = self._hf if allow_special else self._plain
        # encode_batch releases the GIL while it works (encode holds it throughout), so a long
        # prompt tokenised in a worker thread leaves the event loop free.
        return hf.encode_batch([text], add_special_tokens=False)[0].ids

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]
