"""Backends behind the OpenAI-compatible API, chosen once by ``K3STACK_MODEL__ENGINE``.

- ``reference``: the project's own K3 engine (:mod:`.reference`);
- ``openai``: forwards to any OpenAI-compatible endpoint (:mod:`.openai_proxy`);
- ``sglang``: launches or attaches to an SGLang server (:mod:`.sglang`);
- ``replay``: answers from a recorded JSONL trajectory (:mod:`.replay`).
"""

from __future__ import annotations

from collections.abc import Callable

from services.model.serving.backends.base import Backend
from shared.settings import ModelSettings


def _reference(s: ModelSettings) -> Backend:
    from services.model.serving.backends.reference import ReferenceBackend
    from services.model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path=s.tokenizer, checkpoint=s.checkpoint)

    def build_engine():  # type: ignore[no-untyped-def]
        import torch

        from services.model.serving.engine import Engine
        from services.model.serving.runner import K3Runner
        from services.model.serving.scheduler import parse_admission_classes

        if s.num_threads:
            torch.set_num_threads(s.num_threads)
        runner = K3Runner.create(
            preset=s.preset,
            checkpoint=s.checkpoint,
            max_num_seqs=s.max_num_seqs,
            max_pool_tokens=s.max_pool_tokens,
            max_model_len=s.max_model_len or None,
            device=s.device,
            dtype=getattr(torch, s.dtype),
            seed=s.seed,
            page_tokens=s.page_tokens if s.prefix_cache else 0,
        )
        prefix_cache = None
        if s.prefix_cache:
            from services.model.serving.hybrid_cache import HybridPrefixCache
            from services.model.tokenizer.base import END_OF_MSG

            prefix_cache = HybridPrefixCache(
                runner.pools,
                hash_block=s.hash_block_tokens,
                turn_end_ids=[tokenizer.special_id(END_OF_MSG)],
                host_tier_bytes=s.host_tier_bytes,
                slab_bytes=s.checkpoint_slab_bytes,
            )
        if runner.vocab_size < tokenizer.vocab_size:
            raise ValueError(
                f"the model's vocab ({runner.vocab_size}) is smaller than the tokenizer's "
                f"({tokenizer.vocab_size}); set K3STACK_MODEL__TOKENIZER to the model's tokenizer"
            )
        return Engine(
            runner,
            tokenizer,
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=max(s.max_num_batched_tokens, s.max_num_seqs),
            max_queued_requests=s.max_queued_requests,
            prefix_cache=prefix_cache,
            admission_classes=parse_admission_classes(
                s.admission_classes, s.max_num_batched_tokens
            ),
        )

    return ReferenceBackend(
        s.served_model_name,
        tokenizer=tokenizer,
        engine_factory=build_engine,
        default_max_tokens=s.default_max_tokens,
    )


def _openai(s: ModelSettings) -> Backend:
    from services.model.serving.backends.openai_proxy import OpenAIProxyBackend

    if not s.upstream_url:
        raise ValueError("engine 'openai' needs K3STACK_MODEL__UPSTREAM_URL")
    return OpenAIProxyBackend(
        s.served_model_name,
        upstream_url=s.upstream_url,
        upstream_model=s.upstream_model,
        api_key=s.upstream_api_key,
    )


def _sglang(s: ModelSettings) -> Backend:
    from services.model.serving.backends.sglang import SGLangBackend

    return SGLangBackend.from_settings(s)


def _replay(s: ModelSettings) -> Backend:
    from services.model.serving.backends.replay import ReplayBackend

    if s.replay_file is None:
        raise ValueError("engine 'replay' needs K3STACK_MODEL__REPLAY_FILE")
    upstream = _openai(s) if s.upstream_url else None
    return ReplayBackend(s.served_model_name, path=s.replay_file, record_from=upstream)


BACKENDS: dict[str, Callable[[ModelSettings], Backend]] = {
    "reference": _reference,
    "openai": _openai,
    "sglang": _sglang,
    "replay": _replay,
}


def create_backend(settings: ModelSettings) -> Backend:
    """The backend ``settings.engine`` names; a bad name lists the choices."""
    try:
        factory = BACKENDS[settings.engine]
    except KeyError:
        raise ValueError(
            f"unknown engine {settings.engine!r}; choose one of {sorted(BACKENDS)}"
        ) from None
    return factory(settings)


__all__ = ["BACKENDS", "Backend", "create_backend"]
