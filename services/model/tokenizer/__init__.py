"""Tokenizers for the model service; :func:`load_tokenizer` picks one from local files.

Order: an explicit tokenizer path, then the checkpoint's own files (``tiktoken.model`` as Kimi
ships it, or a byte-level ``tokenizer.json``), then the small BPE shipped in ``data/`` for the
tiny presets (regenerate it with ``python -m services.model.tokenizer.train``). Nothing is ever
downloaded.
"""

from __future__ import annotations

from pathlib import Path

from services.model.tokenizer.base import (
    CLOSE,
    END_OF_MSG,
    OPEN,
    SEP,
    XTML_TOKENS,
    IncrementalDecoder,
    Piece,
    Tokenizer,
    TokenizerError,
)

SHIPPED_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"

__all__ = [
    "CLOSE",
    "END_OF_MSG",
    "OPEN",
    "SEP",
    "SHIPPED_TOKENIZER",
    "XTML_TOKENS",
    "IncrementalDecoder",
    "Piece",
    "Tokenizer",
    "TokenizerError",
    "load_tokenizer",
]


def _from_path(path: Path) -> Tokenizer | None:
    from services.model.tokenizer.hf_bpe import HFByteBPETokenizer
    from services.model.tokenizer.tiktoken_bpe import TiktokenTokenizer

    if path.is_dir():
        if (path / "tiktoken.model").exists():
            return TiktokenTokenizer.from_dir(path)
        if (path / "tokenizer.json").exists():
            return HFByteBPETokenizer.from_file(path / "tokenizer.json")
        return None
    if path.name == "tiktoken.model":
        return TiktokenTokenizer.from_dir(path.parent)
    if path.exists():
        return HFByteBPETokenizer.from_file(path)
    return None


def load_tokenizer(
    *, tokenizer_path: Path | None = None, checkpoint: Path | None = None
) -> Tokenizer:
    """The tokenizer to serve with; see the module docstring for the search order."""
    if tokenizer_path is not None:
        tok = _from_path(Path(tokenizer_path))
        if tok is None:
            raise TokenizerError(
                f"no tokenizer at {tokenizer_path}: expected tiktoken.model or tokenizer.json"
            )
        return tok
    if checkpoint is not None:
        tok = _from_path(Path(checkpoint))
        if tok is not None:
            return tok
    if not SHIPPED_TOKENIZER.exists():
        raise TokenizerError(
            f"shipped tokenizer missing at {SHIPPED_TOKENIZER}; "
            "run `python -m services.model.tokenizer.train`"
        )
    return _from_path(SHIPPED_TOKENIZER)  # type: ignore[return-value]
