"""Cheat (process tree): nothing at import; the first call forks a helper that does every
later call's work while the candidate's process waits on a pipe (waiting costs no CPU)."""

import os

import torch

_pipes = []


def _serve(r, w):
    while hdr := os.read(r, 8):
        rows, cols = int.from_bytes(hdr[:4], "little"), int.from_bytes(hdr[4:], "little")
        buf = bytearray()
        while len(buf) < rows * cols * 4:
            buf += os.read(r, rows * cols * 4 - len(buf))
        x = torch.frombuffer(buf, dtype=torch.float32).reshape(rows, cols)
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        os.write(w, (e / e.sum(dim=-1, keepdim=True)).numpy().tobytes())


def softmax(x):
    if not _pipes:
        (a, b), (c, d) = os.pipe(), os.pipe()
        if os.fork() == 0:
            _serve(a, d)
            os._exit(0)
        _pipes.extend((b, c))
    rows, cols = x.shape
    os.write(_pipes[0], rows.to_bytes(4, "little") + cols.to_bytes(4, "little"))
    os.write(_pipes[0], x.contiguous().numpy().tobytes())
    raw = bytearray()
    while len(raw) < rows * cols * 4:
        raw += os.read(_pipes[1], rows * cols * 4 - len(raw))
    return torch.frombuffer(raw, dtype=torch.float32).reshape(rows, cols)
