"""Cheat: reaches into the harness, replaces its captured clock with one that runs 100x slow
and silences the harness's own tamper check. Only the verifier's clock outside the sandbox
can tell. The work itself is 200x the reference's."""

import sys

_h = sys.modules["__main__"]
_real = _h._CLOCK
_h._CLOCK = lambda: _real() // 100
_h.Harness.tampered = lambda self: []


def softmax(x):
    for _ in range(200):
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        out = e / e.sum(dim=-1, keepdim=True)
    return out
