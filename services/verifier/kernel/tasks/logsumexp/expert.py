import torch


def logsumexp(x):
    m = x.amax(dim=-1, keepdim=True)
    e = torch.sub(x, m).exp_()
    return e.sum(dim=-1).log_().add_(m[..., 0])
