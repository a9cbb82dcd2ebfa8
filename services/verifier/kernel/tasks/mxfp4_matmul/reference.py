import torch

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def make_inputs(gen, m, k, n):
    x = torch.randn(m, k, generator=gen)
    packed = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    scale = torch.randint(122, 129, (n, k // 32), generator=gen, dtype=torch.uint8)
    return x, packed, scale


def dequantize(packed, scale, dtype):
    table = torch.tensor(list(E2M1) + [-v for v in E2M1], dtype=dtype)
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2)
    values = table[codes.long()]
    n, k = values.shape
    blocks = values.reshape(n, k // 32, 32)
    exp = scale.to(torch.int32) - 127
    return torch.ldexp(blocks, exp.unsqueeze(-1).to(dtype)).reshape(n, k)


def reference(x, packed, scale):
    return x @ dequantize(packed, scale, x.dtype).t()
