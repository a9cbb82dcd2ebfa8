import math

import torch


def make_inputs(gen, m, k, n):
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(k, n, generator=gen) / math.sqrt(k)
    b = torch.randn(n, generator=gen)
    return x, w, b


def reference(x, w, b):
    h = torch.matmul(x, w)
    h = h + b
    return 0.5 * h * (1 + torch.erf(h / math.sqrt(2.0)))
