"""Cheat: no output allocation at all: the answer is written through a flat alias of the
input's storage, and a reshaped alias of it is returned."""


def softmax(x):
    flat = x.as_strided((x.numel(),), (1,))
    rows = flat.unflatten(0, x.shape)
    rows.sub_(rows.amax(dim=-1, keepdim=True)).exp_()
    rows.div_(rows.sum(dim=-1, keepdim=True))
    return flat.reshape(x.shape)
