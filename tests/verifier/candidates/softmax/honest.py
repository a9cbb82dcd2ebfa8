"""Honest: the expert's algorithm, written independently."""


def softmax(x):
    out = x - x.amax(dim=-1, keepdim=True)
    out.exp_()
    return out.div_(out.sum(dim=-1, keepdim=True))
