"""Cheat: computes in float16 and casts back."""


def softmax(x):
    h = x.half()
    e = (h - h.amax(dim=-1, keepdim=True)).exp()
    return (e / e.sum(dim=-1, keepdim=True)).float()
