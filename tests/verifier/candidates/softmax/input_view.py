"""Cheat: writes the answer over the input and returns a view of the input's memory."""


def softmax(x):
    m = x.amax(dim=-1, keepdim=True)
    x -= m
    x.exp_()
    x /= x.sum(dim=-1, keepdim=True)
    return x.view(x.shape)
