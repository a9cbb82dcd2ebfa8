"""Row-stable matrix products: a row's result must not depend on how many rows share the call.

The prefix cache promises that a request resumed from a cached state computes the same fp32
numbers as one prefilled from token 0 (issue 14, 1e-5 on logits). That needs every token's
arithmetic to be independent of what else runs in the same step. On CPU the BLAS picks a
different kernel for a small number of rows (measured with MKL 2024.2: ``linear`` with 1-3,
5-7 or 9-11 rows, and batched ``matmul`` with 1-3 rows, round differently from the same rows
inside a larger call), so a decode batched alone and one batched with a prefill chunk would
differ by ~1e-5. Padding those calls up to a multiple of :data:`ROW_QUANTUM` rows keeps every
row on the large-call kernel; the cost is at most three zero rows per call. Likewise the
vectorised ``sigmoid`` rounds the elements of a tensor's tail (past the last full vector block)
differently, so tensors whose size varies with the batch (``[tokens, heads]``) go through
:func:`stable_sigmoid`, padded to whole blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ROW_QUANTUM", "StableLinear", "stable_linear", "stable_matmul", "stable_sigmoid"]

#: Row counts below ``ROW_QUANTUM * 3`` are padded to a multiple of this.
ROW_QUANTUM = 4


def _pad_rows(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, int]:
    m = x.shape[dim]
    if m >= 3 * ROW_QUANTUM or m % ROW_QUANTUM == 0:
        return x, m
    pad = ROW_QUANTUM - m % ROW_QUANTUM
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat((x, x.new_zeros(shape)), dim=dim), m


def stable_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``F.linear`` whose rows do not depend on the number of rows in ``x [..., in]``."""
    lead = x.shape[:-1]
    flat, m = _pad_rows(x.reshape(-1, x.shape[-1]), 0)
    return F.linear(flat, weight, bias)[:m].reshape(*lead, weight.shape[0])


def stable_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (``a [..., M, K]``, ``b [..., K, N]``) with rows independent of ``M``."""
    padded, m = _pad_rows(a, -2)
    out = padded @ b
    return out if padded is a else out[..., :m, :]


#: Elements per vector block the padded elementwise ops round up to (covers AVX-512 x 2).
_BLOCK = 64


def stable_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``torch.sigmoid`` with every element computed on the vector path (no scalar tail)."""
    flat = x.reshape(-1)
    pad = -flat.numel() % _BLOCK
    if pad:
        flat = torch.cat((flat, flat.new_zeros(pad)))
    return torch.sigmoid(flat)[: x.numel()].view(x.shape)


class StableLinear(nn.Linear):
    """``nn.Linear`` (same parameters and state-dict names) computed with :func:`stable_linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return stable_linear(x, self.weight, self.bias)
