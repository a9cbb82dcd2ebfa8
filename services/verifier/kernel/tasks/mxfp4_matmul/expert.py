import torch

_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_CODES = torch.tensor(list(_E2M1) + [-v for v in _E2M1])
# Every byte -> its two decoded values at once (low nibble first).
_PAIRS = torch.stack((_CODES[torch.arange(256) & 0x0F], _CODES[torch.arange(256) >> 4]), dim=-1)
_POW2 = torch.exp2(torch.arange(256, dtype=torch.float32) - 127)


def mxfp4_matmul(x, packed, scale):
    n, half = packed.shape
    w = _PAIRS[packed.long()].reshape(n, half // 16, 32)
    w.mul_(_POW2[scale.long()].unsqueeze(-1))
    return x @ w.reshape(n, 2 * half).t()
