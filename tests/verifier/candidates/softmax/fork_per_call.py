"""Cheat (process tree): every call forks a child that does the work into shared memory and
exits before the call returns; the candidate's process only waits (no CPU of its own), and no
other process is alive at any point the measurer could look."""

import mmap
import os

import torch


def softmax(x):
    buf = mmap.mmap(-1, max(x.numel() * 4, 4096))
    out = torch.frombuffer(buf, dtype=torch.float32, count=x.numel()).reshape(x.shape)
    pid = os.fork()
    if pid == 0:
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        out.copy_(e / e.sum(dim=-1, keepdim=True))
        os._exit(0)
    os.waitpid(pid, 0)
    return out.clone()
