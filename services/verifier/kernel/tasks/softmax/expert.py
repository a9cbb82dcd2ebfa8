def softmax(x):
    out = x - x.amax(dim=-1, keepdim=True)
    out.exp_()
    out.div_(out.sum(dim=-1, keepdim=True))
    return out
