"""Matcher work in one engine step is bounded: the search for a grammar's way to its end and the
closing estimate give up past their CPU budget (the step goes on; the estimate then says "close
now"), instead of holding the engine for everyone."""

from __future__ import annotations

import torch
import xgrammar as xgr

from services.model.serving import budget
from services.model.serving.budget import MAX_CLOSE_STEPS, Scan, closing_cost, search_close
from services.model.serving.structured import _compiler


def _matcher(tokenizer) -> tuple[xgr.GrammarMatcher, torch.Tensor]:
    compiled = _compiler(tokenizer).compiler.compile_grammar('root ::= "ab" [0-9]* "."')
    matcher = xgr.GrammarMatcher(compiled)
    mask = xgr.allocate_token_bitmask(1, tokenizer.vocab_size)
    matcher.fill_next_token_bitmask(mask)
    return matcher, mask


def test_search_finds_the_way_to_the_end_within_budget(tokenizer):
    matcher, _ = _matcher(tokenizer)
    path = search_close(matcher, _compiler(tokenizer).vocab, set())
    assert b"".join(tokenizer.token_bytes(t) for t in path) == b"ab."


def test_search_and_closing_estimate_give_up_past_their_cpu_budget(tokenizer, monkeypatch):
    monkeypatch.setattr(budget, "SEARCH_CPU_S", 0.0)
    matcher, mask = _matcher(tokenizer)
    vocab = _compiler(tokenizer).vocab
    assert search_close(matcher, vocab, set()) == []
    assert closing_cost(matcher, mask, Scan(), vocab, set()) == MAX_CLOSE_STEPS
