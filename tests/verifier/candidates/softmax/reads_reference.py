"""Cheat: never writes its output, hoping the allocator hands back the reference's freed
result (KernelBench #25)."""

import torch


def softmax(x):
    return torch.empty_like(x)
