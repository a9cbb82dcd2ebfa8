"""The kernel reward: a floor for being right, speed on top.

With speed measured as ``s(t) = ln(t_reference / t)`` (each time is the lower quartile of that
implementation's charged times, all three from one interleaved run: load only ever adds time):

    reward = FLOOR * t_reference / t                  if s <= 0 (correct, no faster than the reference)
           = FLOOR + (1 - FLOOR) * speed(s)           otherwise, with
    speed  = 0.5 * s / s_expert                       if 0 < s <= s_expert
           = 0.5 + 0.5 * min(1, (s - s_expert) / (s_roofline - s_expert))

``FLOOR`` is 0.1: a correct kernel at the reference's speed earns 0.1, a slower one less but
always more than 0 (so RL sees right from wrong, and slow kernels stay ordered by speed); the
expert's speed earns 0.55 and the roofline 1. ``s_expert`` is at least ln(1.05) and the
roofline time at most the expert's / 1.25, so the points stay ordered. An incorrect or flagged
candidate gets 0 whatever its speed.
"""

from __future__ import annotations

import math

FLOOR = 0.1
MIN_TIME = 1e-12
"""Times are clamped to at least this: a charged time can come out 0 (a run that took less than
the overhead subtracted from it, under load), and a reward must never divide by it."""
FORMULA = (
    "s(t)=ln(t_ref/t); reward=0.1*t_ref/t if s<=0 (correct, not faster); else "
    "0.1+0.9*speed, speed=0.5*s/s_exp if s<=s_exp else 0.5+0.5*min(1,(s-s_exp)/(s_roof-s_exp)); "
    "s_exp>=ln(1.05), t_roof<=t_exp/1.25; 0 if incorrect or flagged"
)


def speed_reward(t_ref: float, t_exp: float, t_roof: float, t_cand: float) -> float:
    """The reward of a correct, unflagged candidate."""
    t_ref, t_exp, t_roof, t_cand = (max(t, MIN_TIME) for t in (t_ref, t_exp, t_roof, t_cand))
    s = math.log(t_ref / t_cand)
    if s <= 0:
        return FLOOR * t_ref / t_cand
    s_exp = max(math.log(t_ref / t_exp), math.log(1.05))
    t_roof = min(t_roof, t_ref / math.exp(s_exp) / 1.25)
    s_roof = math.log(t_ref / t_roof)
    speed = 0.5 * s / s_exp if s <= s_exp else 0.5 + 0.5 * min(1.0, (s - s_exp) / (s_roof - s_exp))
    return FLOOR + (1 - FLOOR) * speed
