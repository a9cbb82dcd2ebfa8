import torch


def make_inputs(gen, rows, cols):
    x = 3 * torch.randn(rows, cols, generator=gen) + 1.5
    w = torch.randn(cols, generator=gen)
    b = torch.randn(cols, generator=gen)
    return x, w, b


def reference(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b
