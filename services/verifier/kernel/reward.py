"""The kernel reward: 0 at reference speed, 0.5 at expert speed, 1 at the roofline.

With speed measured as ``s(t) = ln(t_reference / t)`` (each time is the lower quartile of
that implementation's timed calls, all three from one run: load only ever adds time):

    reward = 0                                    if s <= 0 (no faster than the reference)
           = 0.5 * s / s_expert                   if 0 < s <= s_expert
           = 0.5 + 0.5 * min(1, (s - s_expert) / (s_roofline - s_expert))   otherwise

``s_expert`` is at least ln(1.05) and the roofline time at most the expert's / 1.25, so the
three points stay ordered even when noise or a near-roofline expert would tangle them. An
incorrect or flagged candidate gets 0 whatever its speed.
"""

from __future__ import annotations

import math

FORMULA = (
    "s(t)=ln(t_ref/t); reward=0 if s<=0; 0.5*s/s_exp if s<=s_exp; "
    "else 0.5+0.5*min(1,(s-s_exp)/(s_roof-s_exp)); s_exp>=ln(1.05), t_roof<=t_exp/1.25; 0 if incorrect or flagged"
)


def speed_reward(t_ref: float, t_exp: float, t_roof: float, t_cand: float) -> float:
    s = math.log(t_ref / t_cand)
    if s <= 0:
        return 0.0
    s_exp = max(math.log(t_ref / t_exp), math.log(1.05))
    t_roof = min(t_roof, t_ref / math.exp(s_exp) / 1.25)
    s_roof = math.log(t_ref / t_roof)
    if s <= s_exp:
        return 0.5 * s / s_exp
    return 0.5 + 0.5 * min(1.0, (s - s_exp) / (s_roof - s_exp))
