import math

import torch


def causal_attention(q, k, v):
    b, h, t, d = q.shape
    mask = torch.ones(t, t, dtype=torch.bool).triu_(1)
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(1.0 / math.sqrt(d))
    scores.masked_fill_(mask, float("-inf"))
    return torch.matmul(scores.softmax(dim=-1), v)
