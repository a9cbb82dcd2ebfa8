import torch


def layernorm(x, w, b):
    out = x - x.mean(dim=-1, keepdim=True)
    inv_std = torch.linalg.vecdot(out, out).div_(x.shape[-1]).add_(1e-5).rsqrt_()
    out.mul_(inv_std[..., None])
    return torch.addcmul(b, out, w, out=out)
