"""Honest but slow: the reference's explicit matrices, recomputed 20 times."""

import torch


def kda_step(q, k, v, g, beta, state):
    dk = q.shape[-1]
    for _ in range(20):
        eye = torch.eye(dk, dtype=q.dtype)
        bk = beta[..., None] * k
        transition = eye - bk[..., :, None] * k[..., None, :]
        new_state = (
            transition @ torch.diag_embed(torch.exp(g)) @ state + bk[..., :, None] * v[..., None, :]
        )
        out = (new_state.transpose(-1, -2) @ (q * dk**-0.5)[..., None])[..., 0]
    return out, new_state
