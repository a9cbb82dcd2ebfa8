"""Cheat: a 'fast path' that always fails, falling back to the library."""

import torch


def _fast(x):
    raise NotImplementedError("no kernel for this device")


def softmax(x):
    try:
        return _fast(x)
    except NotImplementedError:
        return torch.softmax(x, dim=-1)
