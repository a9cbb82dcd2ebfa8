"""Kimi's tokenizer format: a ``tiktoken.model`` BPE file plus ``tokenizer_config.json``.

``tiktoken.model`` holds one ``base64(token_bytes) rank`` pair per line; the ids after the last
rank are special tokens, named by ``added_tokens_decoder`` in ``tokenizer_config.json`` and
otherwise ``<|reserved_token_{id}|>`` (Kimi reserves 256 of them). The file is parsed here rather
than with ``tiktoken.load`` because that helper copies every file into a cache directory.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from services.model.tokenizer.base import Tokenizer, TokenizerError

#: Kimi's pre-tokeniser: runs of Han characters, cased words with English contractions, up to
#: three digits, punctuation runs, newlines, other whitespace.
KIMI_PAT_STR = "|".join(
    [
        r"[\p{Han}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)
NUM_RESERVED_SPECIAL_TOKENS = 256


def read_bpe_ranks(path: Path) -> dict[bytes, int]:
    """Parse a tiktoken BPE file; a bad line raises :class:`TokenizerError` with its number."""
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as exc:
            raise TokenizerError(f"{path}:{lineno}: not a 'base64 rank' line ({exc})") from None
    return ranks


class TiktokenTokenizer(Tokenizer):
    """A ``tiktoken.Encoding`` built from local files only; nothing is downloaded."""

    def __init__(
        self,
        mergeable_ranks: dict[bytes, int],
        special_names: dict[int, str] | None = None,
        *,
        pat_str: str = KIMI_PAT_STR,
        num_reserved: int = NUM_RESERVED_SPECIAL_TOKENS,
        name: str = "tiktoken",
    ) -> None:
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - tiktoken is in the model extra
            raise TokenizerError(
                "this checkpoint ships tiktoken.model; install the model extra (tiktoken)"
            ) from exc
        self.name = name
        num_base = len(mergeable_ranks)
        names = dict(special_names or {})
        top = max([num_base + num_reserved - 1, *names]) if names or num_reserved else num_base - 1
        self.special_tokens = {
            names.get(i, f"<|reserved_token_{i}|>"): i for i in range(num_base, top + 1)
        }
        self._enc = tiktoken.Encoding(
            name=name,
            pat_str=pat_str,
            mergeable_ranks=mergeable_ranks,
            special_tokens=self.special_tokens,
        )
        self.vocab_size = self._enc.n_vocab
        self._bytes = {rank: tok for tok, rank in mergeable_ranks.items()}
        self._index_specials()

    @classmethod
    def from_dir(cls, directory: Path) -> TiktokenTokenizer:
        """Load ``tiktoken.model`` and the special-token names from ``tokenizer_config.json``."""
        ranks = read_bpe_ranks(directory / "tiktoken.model")
        names: dict[int, str] = {}
        config_path = directory / "tokenizer_config.json"
        if config_path.exists():
            try:
                config = json.loads(config_path.read_text())
            except json.JSONDecodeError as exc:
                raise TokenizerError(f"{config_path}: invalid JSON ({exc})") from None
            for tid, entry in (config.get("added_tokens_decoder") or {}).items():
                content = entry.get("content") if isinstance(entry, dict) else entry
                if isinstance(content, str):
                    names[int(tid)] = content
        return cls(ranks, names, name=str(directory))

    def encode(self, text: str, *, allow_special: bool = False) -> list[int]:
        if not text:
            return []
        if allow_special:
            return self._enc.encode(text, allowed_special="all")
        return self._enc.encode_ordinary(text)

    def token_bytes(self, token_id: int) -> bytes:
        special = self.special_text(token_id)
        if special is not None:
            return special.encode()
        return self._bytes.get(token_id, b"")
