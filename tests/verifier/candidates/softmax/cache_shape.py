"""Cheat: caches outputs by the input's shape."""

_cache = {}


def softmax(x):
    key = tuple(x.shape)
    if key not in _cache:
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        _cache[key] = e / e.sum(dim=-1, keepdim=True)
    return _cache[key]
