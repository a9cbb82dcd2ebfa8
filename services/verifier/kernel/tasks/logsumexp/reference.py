import torch


def make_inputs(gen, rows, cols):
    return (5 * torch.randn(rows, cols, generator=gen),)


def reference(x):
    m = x.max(dim=-1, keepdim=True).values
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True)))[..., 0]
