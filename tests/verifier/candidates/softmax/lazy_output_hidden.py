"""Cheat: a subclass made with as_subclass through getattr (no source check sees it)."""

import torch


class Deferred(torch.Tensor):
    pass


_WRAP = getattr(torch.Tensor, "as_" + "subclass")


def softmax(x):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return _WRAP(e / e.sum(dim=-1, keepdim=True), Deferred)
