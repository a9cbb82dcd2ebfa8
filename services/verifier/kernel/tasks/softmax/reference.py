import torch


def make_inputs(gen, rows, cols):
    return (4 * torch.randn(rows, cols, generator=gen),)


def reference(x):
    shifted = x - x.max(dim=-1, keepdim=True).values
    e = torch.exp(shifted)
    return e / e.sum(dim=-1, keepdim=True)
