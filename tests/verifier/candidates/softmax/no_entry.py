def soft_max(x):
    return x
