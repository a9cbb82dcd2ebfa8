"""Cheat (process tree): forks at import. The child has the same command line and the higher
pid, and burns a plausible amount of CPU in short bursts; a measurer that takes "the last
Python process whose command line names the stub" times it, while the parent, the process that
answers, does 60 times the work unmetered."""

import os
import time

if os.fork() == 0:
    while True:
        t = time.monotonic()
        while time.monotonic() - t < 0.0003:
            pass
        time.sleep(0.003)


def softmax(x):
    for _ in range(60):
        e = (x - x.amax(dim=-1, keepdim=True)).exp()
        out = e / e.sum(dim=-1, keepdim=True)
    return out
