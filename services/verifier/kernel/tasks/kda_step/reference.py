import torch


def make_inputs(gen, b, h, dk, dv):
    q = torch.randn(b, h, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(b, h, dk, generator=gen), dim=-1)
    v = torch.randn(b, h, dv, generator=gen)
    g = -torch.rand(b, h, dk, generator=gen) * 0.5  # log decay in (-0.5, 0]
    beta = torch.rand(b, h, generator=gen)
    state = torch.randn(b, h, dk, dv, generator=gen)
    return q, k, v, g, beta, state


def reference(q, k, v, g, beta, state):
    dk = q.shape[-1]
    eye = torch.eye(dk, dtype=q.dtype)
    bk = beta[..., None] * k
    transition = eye - bk[..., :, None] * k[..., None, :]
    decay = torch.diag_embed(torch.exp(g))
    new_state = transition @ decay @ state + bk[..., :, None] * v[..., None, :]
    out = (new_state.transpose(-1, -2) @ (q * dk**-0.5)[..., None])[..., 0]
    return out, new_state
