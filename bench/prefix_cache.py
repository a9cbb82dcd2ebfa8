"""Replay a synthetic multi-turn agent trace through the serving path under three cache policies.

- ``hybrid``: this project's cache (large pages, fine hash blocks, KDA checkpoints at hash
  endpoints, turn-boundary checkpoints kept);
- ``align-to-page``: a simulated vLLM-like align mode: hashing at the page size, only the last
  page-aligned state before a request's end checkpointed, no turn retention;
- ``off``: no cache.

Each turn appends a user delta (a turn end closes it) and the model's answer to the
conversation; every few turns a branch re-asks from an earlier turn. Requests run one at a time
through :class:`~services.model.serving.offline.OfflineEngine` (scheduler, paged pool, K3 with
random weights on CPU). Printed per policy: prefill tokens computed, hit rate (tokens restored /
prompt tokens), time-to-first-token summed over the trace against ``off`` (process CPU time, so
other work on a shared machine does not swamp it), the peak checkpoint memory, the pool's bytes
and the checkpoint slab's (KDA checkpoints live in right-sized slab slots, not pool pages; the
slab has the cache's default size, one slot per hash block the pool holds). Running requests'
KDA states live in slots beside the pool too; ``--state-in-pages`` replays with the old layout
(a pool page per running request's state), and ``--full`` also prints how many concurrent
4K-token requests fit in the service's default pool under each layout, at the same bytes. Before the slab (a pool page per checkpoint) the ``--full``
hybrid run read 86.3% at the default pool (133,152 tokens computed); ``--policies hybrid`` runs
that row alone in a fraction of the time.

The default is a smoke run; ``--full`` replays at least 40 turns, until the conversation passes
32K tokens, with deltas of 200-1,000 tokens, 16-token answers, 6144-token pages and 512-token
hash blocks, on the ``tiny-micro`` preset (smaller than ``tiny``: the cache-off baseline
re-prefills every growing context, about a million tokens with 32K-token attention; ``--preset
tiny`` runs the same trace about four times slower). Torch runs one thread by default: on a
shared two-core machine two OpenMP threads spin-waiting on each other cost ten times the CPU.

    PYTHONPATH=. python bench/prefix_cache.py [--full] [--preset tiny]
"""

from __future__ import annotations

import argparse
import os
import random
import time

import torch

from services.model.arch import K3Config, K3ForCausalLM
from services.model.serving.hybrid_cache import HybridPrefixCache
from services.model.serving.offline import OfflineEngine
from services.model.serving.pool import PagedPool, PoolExhausted
from services.model.serving.runner import K3Runner
from shared.settings import ModelSettings

TURN_END = 7


def make_trace(args, seed: int):
    """[(parent turn or -1, delta tokens)]: a main line plus branches from earlier turns.

    At least ``args.turns`` requests, and more until the main line reaches ``args.min_tokens``
    (each main turn adds its delta, its answer and a turn end).
    """
    rng = random.Random(seed)
    trace = []
    main, length, t = -1, 0, 0
    while t < args.turns or length < args.min_tokens:
        n = rng.randint(args.delta_min, args.delta_max)
        delta = [rng.randrange(10, 2000) for _ in range(n)] + [TURN_END]
        if args.branch_every and t % args.branch_every == args.branch_every - 1 and main >= 2:
            trace.append((rng.randrange(0, main), delta))  # a retry from an earlier turn
        else:
            trace.append((main, delta))
            main = len(trace) - 1
            length += len(delta) + args.answer_tokens + 1
        t += 1
    return trace


def replay(model, trace, policy: str, args) -> dict[str, float]:
    page = args.page_tokens
    pool = PagedPool.for_tokens(
        model.config, max_tokens=args.pool_tokens, max_requests=2, page_tokens=page,
        state_in_pages=args.state_in_pages,
    )  # fmt: skip
    cache = None
    if policy == "hybrid":
        cache = HybridPrefixCache(
            pool, hash_block=args.hash_block, turn_end_ids=[TURN_END], slab_bytes=args.slab_bytes
        )
    elif policy == "align-to-page":
        cache = HybridPrefixCache(pool, hash_block=page, slab_bytes=args.slab_bytes)
    eng = OfflineEngine(
        K3Runner(model, pool), max_num_seqs=2, max_num_batched_tokens=args.budget,
        prefix_cache=cache,
    )  # fmt: skip
    convo: dict[int, list[int]] = {}
    prompt_tokens = computed = cached = 0
    ttft = 0.0
    peak_ckpt = 0
    for i, (parent, delta) in enumerate(trace):
        prompt = (convo[parent] + [TURN_END] if parent >= 0 else []) + delta
        t0 = time.process_time()
        req = eng.submit(str(i), prompt, args.answer_tokens)
        done: list = []
        while not req.output_ids:  # time to the first token
            done += eng.step()
        ttft += time.process_time() - t0
        done += eng.run()
        (res,) = done
        convo[i] = prompt + res.output_ids
        prompt_tokens += len(prompt)
        computed += res.computed_tokens - (len(res.output_ids) - 1)  # decodes are not prefill
        cached += res.cached_tokens
        if cache is not None:
            peak_ckpt = max(peak_ckpt, cache.checkpoint_bytes)
    return {
        "prompt": prompt_tokens,
        "computed": computed,
        "hit_rate": cached / prompt_tokens,
        "ttft": ttft,
        "ckpt_bytes": peak_ckpt,
        "slab_bytes": cache.slab.nbytes if cache is not None else 0,
        "pool_bytes": pool_bytes(pool),
        "final_len": max(len(c) for c in convo.values()),
    }


def pool_bytes(pool: PagedPool) -> int:
    """Pages plus the state slots beside them (in the old layout the states are in pages)."""
    return pool.storage.numel() + (0 if pool.state_in_pages else pool.state_raw.numel())


def requests_that_fit(pool: PagedPool, tokens: int) -> int:
    """How many requests of ``tokens`` tokens the pool holds at once (state and KV)."""
    n = 0
    try:
        while True:
            pool.reserve(pool.allocate(), tokens)
            n += 1
    except PoolExhausted:
        return n


def default_pool_fit(tokens: int = 4096) -> list[tuple[str, float, int]]:
    """Concurrent ``tokens``-token requests in the service's default pool (default settings
    and preset): ``(layout, MiB, requests)`` for the old layout (a KDA state per page) with the
    default pool's pages, then states in slots: the default pool (``max_num_seqs`` slots), one
    slot per page, and the old pool's bytes split into as many page-and-slot pairs as fit."""
    s = ModelSettings()
    config = K3Config.preset(s.preset)

    def pool(pages: int, slots: int, in_pages: bool = False) -> PagedPool:
        return PagedPool(
            config, pages, max_requests=slots, page_tokens=s.page_tokens, device="meta",
            state_in_pages=in_pages,
        )  # fmt: skip

    new = PagedPool.for_tokens(
        config, max_tokens=s.max_pool_tokens, max_requests=s.max_num_seqs,
        page_tokens=s.page_tokens, device="meta",
    )  # fmt: skip
    old = pool(new.num_pages, new.num_pages, in_pages=True)
    pairs = pool_bytes(old) // (new.page_bytes + new.state_bytes)
    rows = []
    for layout, p in (
        (f"state in pages: {old.num_pages} pages (before)", old),
        (f"slots: default ({new.num_pages} pages, {s.max_num_seqs} slots)", new),
        (
            f"slots: {new.num_pages} pages, {new.num_pages} slots",
            pool(new.num_pages, new.num_pages),
        ),
        (f"slots: before's bytes ({pairs} + {pairs})", pool(pairs, pairs)),
    ):
        rows.append((layout, pool_bytes(p) / 2**20, requests_that_fit(p, tokens)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="the >= 40-turn, >= 32K-token trace")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--min-tokens", type=int, default=0, help="grow the main line to this")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument(
        "--pool-factor", type=int, default=1,
        help="pool pages per 2x the trace's tokens (checkpoints take whole pages too)",
    )  # fmt: skip
    ap.add_argument("--delta-min", type=int, default=40)
    ap.add_argument("--delta-max", type=int, default=120)
    ap.add_argument("--page-tokens", type=int, default=256)
    ap.add_argument("--hash-block", type=int, default=32)
    ap.add_argument("--budget", type=int, default=512, help="tokens per engine step")
    ap.add_argument("--answer-tokens", type=int, default=2)
    ap.add_argument("--branch-every", type=int, default=3)
    ap.add_argument("--preset", default=None, help="model preset (tiny; --full: tiny-micro)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--slab-bytes", type=int, default=0,
        help="the checkpoint slab's size (default 0: the cache's, sized from the model config)",
    )  # fmt: skip
    ap.add_argument(
        "--state-in-pages", action="store_true",
        help="the old layout: each running request's KDA state in a pool page of its own",
    )  # fmt: skip
    ap.add_argument(
        "--policies", default="off,align-to-page,hybrid",
        help="comma-separated subset (the cache-off baseline is most of a --full run's time)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.full:
        args.turns, args.min_tokens, args.delta_min, args.delta_max = 40, 32768, 200, 1000
        args.page_tokens, args.hash_block, args.budget = 6144, 512, 2048
        args.answer_tokens, args.branch_every = 16, 8
        args.preset = args.preset or "tiny-micro"
    args.preset = args.preset or "tiny"
    torch.set_num_threads(args.threads)
    started = time.monotonic()
    trace = make_trace(args, args.seed)
    args.pool_tokens = (
        sum(len(d) + 1 + args.answer_tokens for _, d in trace) * 2 * args.pool_factor
        + 4 * args.page_tokens
    )
    model = K3ForCausalLM(K3Config.preset(args.preset)).init_weights(args.seed).eval()
    rows = {p: replay(model, trace, p, args) for p in args.policies.split(",")}
    off = rows["off"]["ttft"] if "off" in rows else float("nan")
    print(
        f"trace: {len(trace)} requests, conversation up to {max(r['final_len'] for r in rows.values())} tokens, "
        f"deltas {args.delta_min}-{args.delta_max}, preset {args.preset}, pages "
        f"{args.page_tokens} tokens, hash blocks {args.hash_block}, budget {args.budget}"
    )
    load = os.getloadavg()[0]
    print(
        f"wall {time.monotonic() - started:,.0f} s, {args.threads} thread(s), load {load:.1f}, "
        f"pool {args.pool_tokens:,} tokens"
    )
    print(
        f"{'policy':<14} {'prefill computed':>17} {'hit rate':>9} {'TTFT vs off':>12} "
        f"{'ckpt MiB':>9} {'pool MiB':>9} {'slab MiB':>9}"
    )
    for name, r in rows.items():
        print(
            f"{name:<14} {r['computed']:>17,} {r['hit_rate']:>9.1%} {r['ttft'] / off:>12.2f} "
            f"{r['ckpt_bytes'] / 2**20:>9.2f} {r['pool_bytes'] / 2**20:>9.2f} "
            f"{r['slab_bytes'] / 2**20:>9.2f}"
        )
    if args.full or args.state_in_pages:
        s = ModelSettings()
        print(
            f"\nconcurrent 4K-token requests in the default pool ({s.preset}, "
            f"max_pool_tokens {s.max_pool_tokens:,}, {s.page_tokens}-token pages, "
            f"max_num_seqs {s.max_num_seqs}):"
        )
        print(f"{'layout':<44} {'MiB':>6} {'requests':>9} {'vs before':>10}")
        fit = default_pool_fit()
        for layout, mib, n in fit:
            print(f"{layout:<44} {mib:>6.1f} {n:>9} {n / fit[0][2]:>10.2f}")


if __name__ == "__main__":
    main()
