"""Waits that follow the machine: a budget tuned on an idle host, scaled by how busy this host
is now (the 1-minute load average per core above 1, up to ``MAX_LOAD_SCALE``). A fixed wait that
holds on an idle host fails on a busy one (agent RL keeps every core busy); an unbounded one
hides a service that hangs, so the scale stops at 8x."""

from __future__ import annotations

import os

MAX_LOAD_SCALE = 8.0


def load_per_core() -> float:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 1.0


def load_scale() -> float:
    """How many times an idle host's wait this host needs now: 1 to ``MAX_LOAD_SCALE``."""
    return min(MAX_LOAD_SCALE, max(1.0, load_per_core()))


def load_scaled(base_s: float) -> float:
    return base_s * load_scale()
