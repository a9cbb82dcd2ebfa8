def softmax(x):
    raise RuntimeError("kernel launch failed")
