"""Grammar-constrained strings are valid UTF-8 of the length the grammar counted: xgrammar
takes a UTF-8-encoded surrogate (0xED 0xA0-0xBF ...) for one character, the decoder makes three
U+FFFD of it, so an argument at its ``maxLength`` came out three characters over (seen once in a
stress run of the Messages API's forced tool call). No model here: a small raw-byte vocabulary,
the real xgrammar matcher, the service's :class:`GrammarProcessor` and :class:`Sampler`, and
every token sequence the mask allows drawn at random."""

from __future__ import annotations

import json

import torch
import xgrammar as xgr

from services.model.serving.sampling import Sampler, SamplingParams
from services.model.serving.structured import GrammarProcessor, byte_masks

STOP = 0
# b"\xed" / b"\xa0\x80" spell a surrogate across two tokens; b"\xed\xa0\x80" inside one.
VOCAB = [b"</s>", b"a", b"\xe4", b"\xba\x88", b"\xed", b"\xa0\x80", b"\xed\xa0\x80", b"\x9f\xbf"]
MAX_CHARS = 3


def processor() -> GrammarProcessor:
    info = xgr.TokenizerInfo(VOCAB, xgr.VocabType.RAW, vocab_size=len(VOCAB), stop_token_ids=[0])
    body = {"type": "any_text", "max_chars": MAX_CHARS}
    tag = {"type": "structural_tag", "format": {"type": "sequence", "elements": [body]}}
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_structural_tag(json.dumps(tag))
    never, guard = byte_masks([(i, b) for i, b in enumerate(VOCAB) if i != STOP])
    return GrammarProcessor(compiled, len(VOCAB), never, guard)


def test_masks_name_the_surrogate_tokens() -> None:
    never, guard = byte_masks(list(enumerate(VOCAB))[1:])
    assert never.tolist() == [6]  # the whole surrogate inside one token
    assert guard.ends_with_ed == {4}
    # every token opening with 0xA0-0xBF; 0x9F may follow 0xED (up to U+D7FF): allowed
    assert guard.after_ed.tolist() == [3, 5]


def test_every_drawn_string_decodes_to_what_the_grammar_counted() -> None:
    surrogate_offered = 0
    for seed in range(300):
        proc = processor()
        sampler = Sampler(SamplingParams(seed=seed, logits_processor=proc), vocab_limit=len(VOCAB))
        out: list[int] = []
        for _ in range(8):
            tok = sampler.sample(torch.zeros(len(VOCAB)))
            if tok == STOP:
                break
            out.append(tok)
            surrogate_offered += tok == 4
        text = b"".join(VOCAB[t] for t in out).decode("utf-8", errors="replace")
        assert "\ufffd" not in text, (out, text)
        assert len(text) <= MAX_CHARS, (out, text)
    assert surrogate_offered  # the lone 0xED was drawn (then never followed by 0xA0-0xBF)
