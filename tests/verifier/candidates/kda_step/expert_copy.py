import torch


def kda_step(q, k, v, g, beta, state):
    dk = q.shape[-1]
    s = state * g.exp()[..., None]  # Diag(exp(g)) S
    # (I - beta k k^T) s + beta k v^T = s + beta k (v - k^T s): a rank-1 update.
    ks = torch.einsum("bhk,bhkv->bhv", k, s)
    s.add_((beta[..., None] * k)[..., :, None] * (v - ks)[..., None, :])
    out = torch.einsum("bhkv,bhk->bhv", s, q * dk**-0.5)
    return out, s
