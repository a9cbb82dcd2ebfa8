import math

import torch


def make_inputs(gen, b, h, t, d):
    return tuple(torch.randn(b, h, t, d, generator=gen) for _ in range(3))


def reference(q, k, v):
    t = q.shape[-2]
    mask = torch.triu(torch.full((t, t), float("-inf"), dtype=q.dtype), diagonal=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores + mask
    weights = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.matmul(weights, v)
