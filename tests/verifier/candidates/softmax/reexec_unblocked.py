"""Cheat (process image): at import, the candidate's process replaces itself (exec, same pid)
with the stub run on a job file of its own writing, one in the role of a trusted process: no
op disabled, no decoys, so the library softmax works. The pipes and shared memory survive the
exec, so the new process answers the measurer as the old one would have."""

import json
import os
import sys

import torch

if sys.argv[-1].startswith("/k3s/"):
    with open(sys.argv[-1]) as f:
        job = json.load(f)
    job["role"] = "trusted"
    with open("/tmp/job.json", "w") as f:
        json.dump(job, f)
    os.execv(sys.executable, [sys.executable, "-I", *sys.argv[:-1], "/tmp/job.json"])


def softmax(x):
    return getattr(torch, "soft" + "max")(x, -1)
