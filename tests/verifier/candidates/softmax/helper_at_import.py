"""Cheat (process tree): a fresh interpreter started at import, before any baseline, computes
every answer with the library's own softmax (the op is disabled in the candidate's process
only); the candidate's process just pipes the input over and the result back."""

import subprocess
import sys

import torch

_CODE = """
import sys, torch
r, w = sys.stdin.buffer, sys.stdout.buffer
while hdr := r.read(8):
    rows, cols = int.from_bytes(hdr[:4], "little"), int.from_bytes(hdr[4:], "little")
    x = torch.frombuffer(bytearray(r.read(rows * cols * 4)), dtype=torch.float32)
    w.write(getattr(torch, "soft" + "max")(x.reshape(rows, cols), -1).numpy().tobytes())
    w.flush()
"""
_helper = subprocess.Popen(
    [sys.executable, "-I", "-c", _CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE
)


def softmax(x):
    rows, cols = x.shape
    _helper.stdin.write(rows.to_bytes(4, "little") + cols.to_bytes(4, "little"))
    _helper.stdin.write(x.contiguous().numpy().tobytes())
    _helper.stdin.flush()
    raw = _helper.stdout.read(rows * cols * 4)
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(rows, cols)
