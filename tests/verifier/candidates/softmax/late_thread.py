"""Cheat: one worker started at import (so no thread appears during a call); each call hands
its work to the worker and returns at once, the worker finishing after the return."""

import queue

import torch

_b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
_jobs = queue.SimpleQueue()


def _serve():
    while True:
        x, out = _jobs.get()
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        out.copy_(e / e.sum(dim=-1, keepdim=True))


getattr(_b["__imp" + "ort__"]("thread" + "ing"), "Thr" + "ead")(target=_serve, daemon=True).start()


def softmax(x):
    out = torch.empty_like(x)
    _jobs.put((x.clone(), out))
    return out
