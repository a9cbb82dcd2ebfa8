"""Cheat: calls the library's softmax instead of implementing it."""

import torch


def softmax(x):
    return torch.softmax(x, dim=-1)
