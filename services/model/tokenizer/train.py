"""Train the small byte-level BPE shipped for the tiny presets: ``python -m services.model.tokenizer.train``.

The corpus is :mod:`services.model.tokenizer.corpus` (built in, deterministic) plus the
project's own Python and Markdown files, so merges cover chat text, JSON tool arguments, code and
the XTML attribute vocabulary. Total vocabulary, specials included, is 2048 (the tiny presets'
``vocab_size``): 2032 BPE tokens, then 16 special tokens at the top of the id space, as Kimi's
tokenizer puts its specials after the BPE ranks. Re-running on a changed repo gives a different
(equally valid) file; the shipped one is the source of truth for tests.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from services.model.tokenizer import SHIPPED_TOKENIZER
from services.model.tokenizer.base import XTML_TOKENS
from services.model.tokenizer.corpus import builtin_corpus

TOTAL_VOCAB = 2048
NUM_SPECIAL = 16
SPECIAL_TOKENS: list[str] = [*XTML_TOKENS, "[BOS]", "[EOS]", "[PAD]"]
SPECIAL_TOKENS += [f"<|reserved_token_{i}|>" for i in range(NUM_SPECIAL - len(SPECIAL_TOKENS))]
REPO_ROOT = Path(__file__).resolve().parents[3]


def repo_texts(root: Path = REPO_ROOT) -> Iterator[str]:
    """The project's own sources and docs, in a stable order."""
    for pattern in ("shared/**/*.py", "services/**/*.py", "**/*.md"):
        for path in sorted(root.glob(pattern)):
            if ".venv" in path.parts or "node_modules" in path.parts:
                continue
            try:
                yield path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue


def train(out: Path = SHIPPED_TOKENIZER, *, include_repo: bool = True) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOTAL_VOCAB - NUM_SPECIAL,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = list(builtin_corpus())
    if include_repo:
        texts += list(repo_texts())
    tok.train_from_iterator(texts, trainer=trainer)
    added = tok.add_special_tokens(SPECIAL_TOKENS)
    assert added == NUM_SPECIAL, f"expected {NUM_SPECIAL} new specials, got {added}"
    size = tok.get_vocab_size(with_added_tokens=True)
    assert size <= TOTAL_VOCAB, f"vocab {size} exceeds {TOTAL_VOCAB}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    return tok


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SHIPPED_TOKENIZER)
    parser.add_argument("--no-repo", action="store_true", help="train on the built-in corpus only")
    args = parser.parse_args(argv)
    tok = train(args.out, include_repo=not args.no_repo)
    print(f"wrote {args.out}: {tok.get_vocab_size(with_added_tokens=True)} tokens")


if __name__ == "__main__":
    main()
