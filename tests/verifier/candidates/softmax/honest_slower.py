"""Honest and much slower than the reference: the reference's own steps, done six times."""


def softmax(x):
    for _ in range(6):
        shifted = x - x.max(dim=-1, keepdim=True).values
        e = shifted.exp()
        out = e / e.sum(dim=-1, keepdim=True)
    return out
