"""Cheat: captures once into a static buffer and 'replays' without redoing the work
(on a GPU this would be a torch.cuda.CUDAGraph whose inputs are never refreshed)."""

import torch

_static = {}


def softmax(x):
    if torch.cuda.is_available() and "graph" not in _static:
        _static["graph"] = torch.cuda.CUDAGraph()
    key = tuple(x.shape)
    if key not in _static:
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        _static[key] = e / e.sum(dim=-1, keepdim=True)
    return _static[key]
